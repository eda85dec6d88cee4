import { mkdtempSync, rmSync } from "node:fs";
import { get } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import type { Database } from "../../src/storage/index.js";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import {
  openTestPostgres,
  postgresUrlFor,
  schemaConnection,
  testSchemaName,
} from "../support/database.js";

/**
 * `traitgate serve --workers N` (src/serve-workers.ts): N worker processes share the port and
 * each answers calls; one that dies is started again; SIGTERM to the primary stops them all
 * with exit 0. Refused (exit 2) with a bad count, on the embedded database and with LOG_FILE.
 */

const secrets = {
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  JWT_SECRET: "serve-workers-secret-0123456789-abcdef",
  DATA_ENCRYPTION_KEY: Buffer.alloc(32, 3).toString("base64"),
  PORT: "0",
  HOST: "127.0.0.1",
  LOG_LEVEL: "info",
};

interface LogLine {
  msg?: string;
  worker?: number;
  pid?: number;
  route?: string;
}

const linesOf = (output: string): LogLine[] =>
  output
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as LogLine);

/** GET /healthz on a new connection each time (no keep-alive: each may reach another worker). */
const healthz = (url: string) =>
  new Promise<number>((resolve, reject) => {
    get(`${url}/healthz`, { agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    }).on("error", reject);
  });

/** GET /metrics (loopback may read it by default): the sum of a counter's series matching `labels`. */
const counterSum = async (url: string, name: string, labels: RegExp) => {
  const res = await fetch(`${url}/metrics`, { headers: { connection: "close" } });
  expect(res.status).toBe(200);
  return (await res.text())
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`) && labels.test(l))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
};

/** Waits until `check` holds, polling; throws past `timeoutMs`. */
async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(50);
  }
}

describe("serve --workers refusals", () => {
  it.each([["0"], ["65"], ["two"], ["1.5"]])("--workers %s: exit 2 naming the flag", async (n) => {
    const { code, stderr } = await runCli(["serve", "--workers", n], secrets);
    expect(code).toBe(2);
    expect(stderr).toContain("--workers must be an integer from 1 to 64");
    expect(stderr).toContain("traitgate serve --help");
  });

  it("an unknown option: exit 2", async () => {
    const { code, stderr } = await runCli(["serve", "--port", "1"], secrets);
    expect(code).toBe(2);
    expect(stderr).toContain("--port");
  });

  it("on the embedded database: exit 2, saying why, and nothing opened", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "tg-workers-"));
    try {
      const { code, stderr, stdout } = await runCli(["serve", "--workers", "2"], {
        ...secrets,
        DATA_DIR: dataDir,
      });
      expect(code).toBe(2);
      expect(stderr).toContain("the embedded database (PGlite) is opened by one process only");
      expect(stderr).toContain("DB_CONNECTION");
      expect(stdout).not.toContain("traitgate listening");
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("with LOG_FILE: exit 2", async () => {
    const { code, stderr } = await runCli(["serve", "--workers", "2"], {
      ...secrets,
      DB_CONNECTION: "postgres://nobody@127.0.0.1:1/none",
      LOG_FILE: join(tmpdir(), "tg-workers-never.log"),
    });
    expect(code).toBe(2);
    expect(stderr).toContain("serve --workers does not write LOG_FILE");
  });
});

const url = postgresUrlFor("serve --workers");

describe.skipIf(!url)("serve --workers 2 on PostgreSQL", { timeout: 120_000 }, () => {
  let db: Database | undefined;
  afterAll(async () => {
    killAll();
    await db?.close();
  });

  it("answers from both workers, restarts one that dies, and stops all on SIGTERM", async () => {
    const base = url ?? "";
    const schema = testSchemaName();
    // The schema, empty: the two workers migrate it together (src/storage/migrate.ts locks).
    db = await openTestPostgres(base, schema);
    const env = {
      ...secrets,
      DB_CONNECTION: schemaConnection(base, schema),
    };
    const { child, output } = await startCli(
      ["serve", "--workers", "2"],
      env,
      /traitgate listening[\s\S]*traitgate listening/,
    );
    const listening = () => linesOf(output()).filter((l) => l.msg === "traitgate listening");
    expect(new Set(listening().map((l) => l.worker))).toEqual(new Set([1, 2]));
    const serverUrl = listeningUrl(output());
    expect(listening().every((l) => listeningUrl(JSON.stringify(l)) === serverUrl)).toBe(true);

    const answeredBy = () =>
      new Set(
        linesOf(output())
          .filter((l) => l.msg === "call" && l.route === "GET /healthz")
          .map((l) => l.worker),
      );
    await until(
      async () => {
        expect(await healthz(serverUrl)).toBe(200);
        return answeredBy().size === 2;
      },
      20_000,
      "both workers answer /healthz",
    );
    expect(answeredBy()).toEqual(new Set([1, 2]));

    // Any worker's /metrics counts every worker's calls (src/metrics/cluster.ts): the /healthz
    // calls counted equal those logged by both workers, more than either answered alone.
    const healthzLogged = () =>
      linesOf(output()).filter((l) => l.msg === "call" && l.route === "GET /healthz");
    await until(
      async () =>
        (await counterSum(serverUrl, "traitgate_rpc_requests_total", /protocol="http"/)) ===
        healthzLogged().length,
      10_000,
      "the scrape counts every worker's /healthz calls",
    );
    const perWorker = [1, 2].map((w) => healthzLogged().filter((l) => l.worker === w).length);
    expect(Math.max(...perWorker)).toBeLessThan(healthzLogged().length);

    // Worker 1 dies: it is logged and started again, with a new pid, on the same port.
    const first = listening().find((l) => l.worker === 1);
    const firstPid = first?.pid;
    if (typeof firstPid !== "number" || firstPid <= 1) throw new Error("worker 1 logged no pid");
    process.kill(firstPid, "SIGKILL");
    await until(
      () => listening().filter((l) => l.worker === 1).length === 2,
      20_000,
      "worker 1 started again",
    );
    const died = linesOf(output()).find((l) => l.msg === "worker died; restarting it");
    expect(died).toMatchObject({ worker: 1, signal: "SIGKILL" });
    const again = listening().filter((l) => l.worker === 1)[1];
    expect(again?.pid).not.toBe(first?.pid);
    expect(listeningUrl(JSON.stringify(again))).toBe(serverUrl);
    expect(await healthz(serverUrl)).toBe(200);

    const workerPids = [again?.pid, listening().find((l) => l.worker === 2)?.pid];
    expect(await stopCli(child)).toBe(0);
    const stopped = linesOf(output()).filter((l) => l.msg === "stopped");
    expect(new Set(stopped.map((l) => l.worker))).toEqual(new Set([1, 2, undefined]));
    for (const pid of workerPids) {
      expect(pid).toBeGreaterThan(1);
      expect(() => process.kill(pid as number, 0)).toThrow();
    }
  });
});
