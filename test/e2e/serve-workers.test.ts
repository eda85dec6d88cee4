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
import { parseExposition, sampleValue } from "../support/prometheus.js";

/**
 * `traitgate serve --workers N` (src/serve-workers.ts): N worker processes share the port and
 * each answers calls; one that dies is started again; one that is stuck is left out of a
 * scrape of /metrics, which still answers; SIGTERM to the primary stops them all with exit 0.
 * Refused (exit 2) with a bad count, on the embedded database and with LOG_FILE.
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
  worker_pid?: number;
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

/** GET /metrics on a new connection: its status, text and how long it took. */
const scrape = async (url: string) => {
  const started = performance.now();
  const res = await fetch(`${url}/metrics`, {
    headers: { connection: "close" },
    signal: AbortSignal.timeout(20_000),
  });
  const text = await res.text();
  return { status: res.status, text, ms: Math.round(performance.now() - started) };
};

/** `traitgate_metrics_workers{state}` in an exposition: workers a scrape holds or lacks. */
const workersGauge = (text: string, state: "answered" | "missing") =>
  sampleValue(parseExposition(text), "traitgate_metrics_workers", { state });

/** The sum of a counter's series matching `labels` in an exposition. */
const sumOf = (text: string, name: string, labels: RegExp) =>
  text
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`) && labels.test(l))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);

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
  const dbs: Database[] = [];
  afterAll(async () => {
    killAll();
    for (const db of dbs) await db.close();
  });

  /** `serve --workers 2` on a schema of its own, once both workers listen. */
  const startWorkers = async () => {
    const base = url ?? "";
    const schema = testSchemaName();
    // The schema, empty: the two workers migrate it together (src/storage/migrate.ts locks).
    dbs.push(await openTestPostgres(base, schema));
    const started = await startCli(
      ["serve", "--workers", "2"],
      { ...secrets, DB_CONNECTION: schemaConnection(base, schema) },
      /traitgate listening[\s\S]*traitgate listening/,
    );
    return { ...started, serverUrl: listeningUrl(started.output()) };
  };

  it("answers from both workers, restarts one that dies, and stops all on SIGTERM", async () => {
    const { child, output, serverUrl } = await startWorkers();
    const listening = () => linesOf(output()).filter((l) => l.msg === "traitgate listening");
    expect(new Set(listening().map((l) => l.worker))).toEqual(new Set([1, 2]));
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

  it("a stuck worker: a scrape answers without it, says so, and counts it again once it answers", async () => {
    const { child, output, serverUrl } = await startWorkers();
    const listening = () => linesOf(output()).filter((l) => l.msg === "traitgate listening");
    const healthzLogged = (worker?: number) =>
      linesOf(output()).filter(
        (l) =>
          l.msg === "call" &&
          l.route === "GET /healthz" &&
          (worker === undefined || l.worker === worker),
      );
    await until(
      async () => {
        expect(await healthz(serverUrl)).toBe(200);
        return new Set(healthzLogged().map((l) => l.worker)).size === 2;
      },
      20_000,
      "both workers answer /healthz",
    );
    const stuckPid = listening().find((l) => l.worker === 2)?.pid;
    if (typeof stuckPid !== "number" || stuckPid <= 1) throw new Error("worker 2 logged no pid");

    // SIGSTOP freezes worker 2 as a busy loop would: it reads no message and no connection.
    process.kill(stuckPid, "SIGSTOP");
    try {
      // The cluster hands each new connection to a worker that took its previous one: two
      // connections in turn give the frozen worker one it never takes, and every later
      // connection (the scrapes below) goes to worker 1.
      for (let i = 0; i < 2; i++) {
        await new Promise<void>((resolve) => {
          const req = get(`${serverUrl}/healthz`, { agent: false, timeout: 1_000 }, (res) => {
            res.resume();
            res.on("end", () => resolve());
          });
          req.on("timeout", () => req.destroy());
          req.on("error", () => resolve());
        });
      }

      // The scrape answers 200 with worker 1's calls, and says one worker is missing.
      const counted = (text: string) =>
        sumOf(text, "traitgate_rpc_requests_total", /protocol="http"/);
      let partial = await scrape(serverUrl);
      await until(
        async () => {
          expect(partial.status).toBe(200);
          if (counted(partial.text) === healthzLogged(1).length) return true;
          partial = await scrape(serverUrl);
          return false;
        },
        20_000,
        "a scrape counts worker 1's calls",
      );
      // The primary waits 2 s for a worker (prom-client's aggregation failed the scrape after 5 s).
      expect(partial.ms, "the scrape's time in ms").toBeLessThan(4_500);
      expect(workersGauge(partial.text, "answered")).toBe(1);
      expect(workersGauge(partial.text, "missing")).toBe(1);
      // The primary names the worker left out.
      const warned = linesOf(output()).filter(
        (l) => l.msg === "a worker did not answer for the metrics: this scrape leaves it out",
      );
      expect(warned.length).toBeGreaterThan(0);
      expect(warned.every((l) => l.worker === 2 && l.worker_pid === stuckPid)).toBe(true);
    } finally {
      process.kill(stuckPid, "SIGCONT");
    }

    // Resumed, worker 2 answers again: the next scrapes count both workers.
    await until(
      async () => {
        const whole = await scrape(serverUrl);
        expect(whole.status).toBe(200);
        return (
          workersGauge(whole.text, "answered") === 2 &&
          workersGauge(whole.text, "missing") === 0 &&
          sumOf(whole.text, "traitgate_rpc_requests_total", /protocol="http"/) ===
            healthzLogged().length
        );
      },
      20_000,
      "a scrape counts both workers again",
    );
    expect(await stopCli(child)).toBe(0);
  });
});
