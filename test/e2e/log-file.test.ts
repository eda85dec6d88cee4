import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";

/**
 * `traitgate serve` with LOG_FILE, as an operator runs it: the file handler's worker thread
 * has written every line, the last one included, by the time the process has exited on
 * SIGTERM; a LOG_FILE that cannot be written stops the start, saying so.
 */

const dirs: string[] = [];
afterAll(() => {
  killAll();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-logfile-"));
  dirs.push(dir);
  return dir;
}

const env = (dir: string, logFile: string): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  DATA_DIR: join(dir, "data"),
  PORT: "0",
  HOST: "127.0.0.1",
  JWT_SECRET: "log-file-test-secret-0123456789-abcdefgh",
  DATA_ENCRYPTION_KEY: Buffer.alloc(32, 5).toString("base64"),
  LOG_FILE: logFile,
});

describe("traitgate serve with LOG_FILE", () => {
  it("has every line in the file when it has stopped, the last one included", async () => {
    const dir = tempDir();
    const logDir = join(dir, "logs");
    const { child, output } = await startCli(
      ["serve"],
      env(dir, join(logDir, "traitgate.log")),
      /traitgate listening/,
    );
    const url = listeningUrl(output());
    const login = await fetch(`${url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "nobody", password: "log-file-password-marker" }),
    });
    expect(login.status).toBe(401);
    expect(await stopCli(child)).toBe(0);

    // The folder was made; one file, named by pino-roll.
    expect(readdirSync(logDir)).toEqual(["traitgate.1.log"]);
    const lines = readFileSync(join(logDir, "traitgate.1.log"), "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as { msg: string });
    const messages = lines.map((l) => l.msg);
    expect(messages).toContain("traitgate listening");
    expect(messages).toContain("call");
    expect(messages).toContain("shutting down");
    expect(messages.at(-1)).toBe("stopped");
    // The console got the same lines.
    const consoleLines = output()
      .split("\n")
      .filter((l) => l.startsWith("{"));
    expect(consoleLines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(messages);
    expect(readFileSync(join(logDir, "traitgate.1.log"), "utf8")).not.toContain(
      "log-file-password-marker",
    );
  }, 120_000);

  it("refuses to start when LOG_FILE cannot be written, naming it", async () => {
    const dir = tempDir();
    const notAFolder = join(dir, "a-file");
    writeFileSync(notAFolder, "");
    const result = await runCli(["serve"], env(dir, join(notAFolder, "traitgate.log")));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      `LOG_FILE ${join(notAFolder, "traitgate.log")} cannot be written`,
    );
    expect(result.stdout).not.toContain("traitgate listening");
  }, 60_000);
});
