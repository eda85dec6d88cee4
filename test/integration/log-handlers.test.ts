import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { type LogFileConfig, openLogHandlers } from "../../src/log-handlers.js";
import { startCore } from "../../src/platform.js";
import { openTestDatabase } from "../support/database.js";
import { callJson } from "../support/http.js";
import { testDataKey, testSecret } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * The log's handlers (issue 16, item 6): with LOG_FILE, every line goes to the console and to
 * the file, redacted the same way, rotated at the configured size, and both follow the
 * `log_level` setting while the server runs.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-logs-"));
  dirs.push(dir);
  return dir;
}

/** The lines of every file in `dir`, oldest file first (pino-roll numbers them). */
function fileLines(dir: string): string[] {
  return logFiles(dir).flatMap((f) =>
    readFileSync(join(dir, f), "utf8")
      .split("\n")
      .filter((l) => l !== ""),
  );
}

function logFiles(dir: string): string[] {
  const number = (f: string) => Number(/\.(\d+)\.log$/.exec(f)?.[1] ?? -1);
  return readdirSync(dir)
    .filter((f) => number(f) >= 0)
    .sort((a, b) => number(a) - number(b));
}

const fileConfig = (dir: string, overrides: Partial<LogFileConfig> = {}): LogFileConfig => ({
  path: join(dir, "traitgate.log"),
  maxBytes: 10 * 1024 * 1024,
  frequency: undefined,
  keep: 5,
  ...overrides,
});

describe("LOG_FILE beside the console, on a real server", () => {
  it("writes the same redacted lines to both, and both follow log_level live", async () => {
    const dir = tempDir();
    const consoleLines: string[] = [];
    const logs = await openLogHandlers({
      level: "info",
      file: fileConfig(dir),
      console: { write: (line: string) => void consoleLines.push(line) },
    });
    const env = {
      JWT_SECRET: testSecret,
      DATA_ENCRYPTION_KEY: testDataKey,
      PORT: "0",
      HOST: "127.0.0.1",
    };
    const db = await openTestDatabase();
    const core = await startCore({ config: loadConfig(env).config, log: logs.log, db, env });
    const secret = "log-file-secret-marker";
    try {
      // A line that carries secrets (as a mistake in a handler would): redacted before it
      // leaves this thread, in both handlers.
      logs.log.info(
        {
          password: secret,
          req: { headers: { authorization: `Bearer ${secret}`, "x-api-key": secret } },
          err: { message: "failed", detail: `Key (username)=(${secret})` },
        },
        "a line with secrets",
      );
      const login = await callJson(core.server.url, "/auth/login", {
        username: "nobody",
        password: secret,
      });
      expect(login.status).toBe(401);
      logs.log.debug("debug before: dropped");

      const actor = { kind: "system" as const, userId: "t", username: "t", apiKeyId: undefined };
      const setLevel = async (level: string) => {
        await core.settingsAdmin.update(
          actor,
          { requestId: `lvl-${level}` },
          {
            values: { log_level: level },
          },
        );
        await core.settings.refresh();
        await until(() => logs.log.level === level, 5000);
      };
      await setLevel("debug");
      logs.log.debug("debug after: kept");
      await setLevel("warn");
      logs.log.info("info at warn: dropped");
      logs.log.warn("warn at warn: kept");
    } finally {
      await core.close();
      await db.close();
      await logs.close();
    }

    const file = fileLines(dir);
    // Every console line is in the file, in the same order, byte for byte.
    expect(file).toEqual(consoleLines.map((l) => l.trimEnd()));
    const text = file.join("\n");
    expect(text).not.toContain(secret);
    const withSecrets = file.map((l) => JSON.parse(l)).find((l) => l.msg === "a line with secrets");
    expect(withSecrets).toMatchObject({
      password: "[redacted]",
      req: { headers: { authorization: "[redacted]", "x-api-key": "[redacted]" } },
      err: { detail: "[redacted]" },
    });
    const messages = file.map((l) => (JSON.parse(l) as { msg: string }).msg);
    expect(messages).toContain("traitgate listening");
    expect(messages).toContain("call");
    expect(messages).toContain("log level changed");
    expect(messages).toContain("debug after: kept");
    expect(messages).toContain("warn at warn: kept");
    expect(messages).not.toContain("debug before: dropped");
    expect(messages).not.toContain("info at warn: dropped");
  });
});

describe("rotation", () => {
  it("starts a new file at the configured size and keeps LOG_FILE_KEEP old ones", async () => {
    const dir = tempDir();
    const maxBytes = 4096;
    const logs = await openLogHandlers({
      level: "info",
      file: fileConfig(dir, { maxBytes, keep: 2 }),
      console: { write: () => {} },
    });
    const filler = "x".repeat(200);
    // ~300 bytes a line, ~120 KB in all: 30 files' worth. Paced, as a server writes.
    const count = 400;
    for (let i = 0; i < count; i++) {
      logs.log.info({ i, filler }, "line");
      if (i % 10 === 9) await new Promise((r) => setTimeout(r, 10));
    }
    await logs.close();

    const files = logFiles(dir);
    // The current file and two older ones; the first files were removed.
    expect(files.length).toBe(3);
    expect(files[0]).not.toBe("traitgate.1.log");
    // A file is closed once it has reached the size, not before. (How far past it depends on
    // how many lines the file's worker thread wrote at once.)
    for (const f of files.slice(0, -1)) {
      expect(statSync(join(dir, f)).size).toBeGreaterThanOrEqual(maxBytes);
    }
    // What is kept is the end of the log, every line whole and in order.
    const kept = fileLines(dir).map((l) => (JSON.parse(l) as { i: number }).i);
    expect(kept.at(-1)).toBe(count - 1);
    expect(kept.length).toBeLessThan(count);
    expect(kept).toEqual(kept.map((_, k) => kept[0]! + k));
  });
});

describe("a file that fails while the server runs", () => {
  it("says so once on the console, where every line then goes; nothing throws", async () => {
    const dir = join(tempDir(), "logs");
    const consoleLines: string[] = [];
    const logs = await openLogHandlers({
      level: "info",
      file: fileConfig(dir, { maxBytes: 2048 }),
      console: { write: (line: string) => void consoleLines.push(line) },
    });
    logs.log.info("before");
    // The folder becomes a file: the next rotation cannot open a file there.
    rmSync(dir, { recursive: true, force: true });
    writeFileSync(dir, "");
    const failed = () => consoleLines.filter((l) => l.includes("the log file handler failed"));
    let i = 0;
    await until(() => {
      logs.log.info({ i: i++, filler: "x".repeat(200) }, "line");
      return failed().length > 0;
    }, 10_000);
    logs.log.info("after");
    await logs.close();
    expect(failed()).toHaveLength(1);
    expect(JSON.parse(failed()[0]!)).toMatchObject({ level: "error", error: expect.any(String) });
    expect(JSON.parse(consoleLines.at(-1)!)).toMatchObject({ msg: "after" });
  });
});

describe("LOG_FILE configuration", () => {
  const good = { JWT_SECRET: testSecret, DATA_ENCRYPTION_KEY: testDataKey };

  it("reads the file and its rotation, with defaults", () => {
    expect(loadConfig(good).config.logFile).toBeUndefined();
    expect(loadConfig({ ...good, LOG_FILE: "/var/log/tg/traitgate.log" }).config.logFile).toEqual({
      path: "/var/log/tg/traitgate.log",
      maxBytes: 100 * 1024 * 1024,
      frequency: undefined,
      keep: 10,
    });
    expect(
      loadConfig({
        ...good,
        LOG_FILE: "t.log",
        LOG_FILE_MAX_SIZE: "512k",
        LOG_FILE_FREQUENCY: "Daily",
        LOG_FILE_KEEP: "3",
      }).config.logFile,
    ).toEqual({ path: "t.log", maxBytes: 512 * 1024, frequency: "daily", keep: 3 });
  });

  it("names every bad value", () => {
    const problems = (env: NodeJS.ProcessEnv) => {
      try {
        loadConfig({ ...good, ...env });
        return [];
      } catch (err) {
        return (err as { problems: string[] }).problems;
      }
    };
    expect(
      problems({
        LOG_FILE: "t.log",
        LOG_FILE_MAX_SIZE: "10mb",
        LOG_FILE_FREQUENCY: "weekly",
        LOG_FILE_KEEP: "0",
      }),
    ).toEqual([
      'LOG_FILE_MAX_SIZE must be a size of at least 1k: bytes, or a number with k, m or g (got "10mb")',
      'LOG_FILE_FREQUENCY must be daily or hourly (got "weekly")',
      'LOG_FILE_KEEP must be an integer from 1 to 1000 (got "0")',
    ]);
    expect(problems({ LOG_FILE_MAX_SIZE: "1m" })).toEqual(["LOG_FILE_MAX_SIZE needs LOG_FILE"]);
  });
});
