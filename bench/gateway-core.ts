import { randomBytes, randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { embeddedDatabaseDir, loadConfig } from "../src/config.js";
import { createLogger, silentLogger } from "../src/log.js";
import { startCore } from "../src/platform.js";
import { type Database, type Executor, openDatabase } from "../src/storage/index.js";
import { runLoad } from "./load.js";

/**
 * The core of the gateway benchmark, as its own process (so that the load
 * generator does not share its event loop): `startCore` as `traitgate serve`
 * does, on the embedded database in DATA_DIR or, with BENCH_PG_URL, on
 * PostgreSQL in a schema of its own dropped at exit. Creates an admin user and
 * an API key, prints one JSON line `{url, password, apiKey}`, and runs until
 * SIGTERM. Started by bench/gateway.ts (NODE_OPTIONS such as --cpu-prof pass through).
 */

const pgUrl = process.env.BENCH_PG_URL;
const schema = `tg_bench_${randomBytes(4).toString("hex")}`;
const { config } = loadConfig(process.env);
const log = createLogger({ level: config.logLevel });
const opened: Database | undefined = pgUrl
  ? await openDatabase({ connection: pgUrl, schema, log: silentLogger })
  : process.env.BENCH_COUNT_QUERIES
    ? await openDatabase({ dataDir: embeddedDatabaseDir(config), log: silentLogger })
    : undefined;
/** BENCH_COUNT_QUERIES=<file>: statements by text, written to the file every second (what a call costs). */
const counts = new Map<string, number>();
const count = (sql: string) => {
  const key = sql.replace(/\s+/g, " ").slice(0, 90);
  counts.set(key, (counts.get(key) ?? 0) + 1);
};
const counted = <T extends Executor>(e: T): T =>
  ({
    ...e,
    query: (sql: string, params?: readonly unknown[]) => {
      count(sql);
      return e.query(sql, params);
    },
    exec: (sql: string) => {
      count(sql);
      return e.exec(sql);
    },
  }) as T;
const db: Database | undefined =
  opened && process.env.BENCH_COUNT_QUERIES
    ? {
        ...counted(opened),
        kind: opened.kind,
        transaction: (fn) => opened.transaction((tx) => fn(counted(tx))),
        session: opened.session.bind(opened),
        ping: opened.ping.bind(opened),
        listen: opened.listen.bind(opened),
        close: opened.close.bind(opened),
      }
    : opened;
const core = await startCore({ config, log, ...(db ? { db } : {}) });
const password = randomBytes(18).toString("base64url");
await core.identity.createUser({
  username: "bench-admin",
  email: "",
  password,
  roles: ["admin"],
});
const { key } = await core.apiKeys.create(
  { type: "system" },
  { requestId: null },
  {
    name: "gateway bench",
    scopes: [
      "plugins:read",
      "plugins:write",
      "operator:read",
      "operator:write",
      "service_accounts:write",
    ],
    expiresAt: undefined,
  },
);
process.stdout.write(
  `${JSON.stringify({ benchCore: true, url: core.server.url, password, apiKey: key })}\n`,
);

const countsFile = process.env.BENCH_COUNT_QUERIES;
if (countsFile) {
  setInterval(() => {
    const lines = [...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${n}\t${k}`);
    writeFileSync(countsFile, `${lines.join("\n")}\n`);
  }, 1000).unref();
}

// SIGUSR2: the same call through `core.gateway.call` (what in-process callers such as core
// search use: checks, policy, audit, forward, but no listener, Connect or transcoder), at 1
// and 64 in flight; prints one JSON line `{inProcess: LoadResult[]}`.
process.on("SIGUSR2", () => {
  void (async () => {
    const payload = JSON.parse(process.env.BENCH_PAYLOAD ?? "{}");
    const seconds = Number(process.env.BENCH_SECONDS ?? "3");
    const call = () =>
      core.gateway.call({
        caller: { kind: "service", id: "ai-core", name: "ai-core" },
        callerPlugin: "ai-core",
        pluginId: "echo",
        operation: "rag_query",
        payload,
        timeoutMs: undefined,
        requestId: randomUUID(),
      });
    const inProcess = [];
    for (const concurrency of [1, 64]) {
      inProcess.push(
        await runLoad("gateway in process (`core.gateway.call`, no transport)", call, {
          concurrency,
          seconds,
          // This process's CPU (the load generator's share of it is a closure call).
          cpu: () => {
            const used = process.cpuUsage();
            return { core: (used.user + used.system) / 1000 };
          },
        }),
      );
    }
    process.stdout.write(`${JSON.stringify({ inProcess })}\n`);
  })();
});

let stopping = false;
// SIGINT too: Ctrl-C reaches the whole process group, this process included.
const stop = () => {
  if (stopping) return;
  stopping = true;
  void (async () => {
    await core.close();
    if (db) {
      await db.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
      await db.close();
    }
    process.exit(0);
  })();
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
