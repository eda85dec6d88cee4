import { randomBytes } from "node:crypto";
import pg from "pg";
import { type AuditEventInput, createAuditWriter, verifyAuditChain } from "../src/audit/index.js";
import { silentLogger } from "../src/log.js";
import { type Database, migrate, openDatabase } from "../src/storage/index.js";
import { onInterrupt, temporaryDir } from "./interrupt.js";
import { type LoadResult, runLoad } from "./load.js";

/**
 * The audit writer: events/s with group commit (batches of up to 512 in one transaction) at
 * 1, 64 and 512 concurrent writers, against one batch per event with the same chaining
 * (the same writer with maxBatch 1), on the embedded database (PGlite in a temporary
 * directory) and on PostgreSQL (BENCH_DATABASE_URL, default the local server, in a schema of
 * its own dropped afterwards; skipped with a note when unreachable).
 */

const writerCounts = [1, 64, 512];
const defaultUrl = "postgres://postgres@127.0.0.1:5432/test";

interface Row {
  database: string;
  writers: number;
  group: LoadResult;
  single: LoadResult;
}

/** A policy decision's event: the most frequent kind. */
function decisionEvent(n: number): AuditEventInput {
  return {
    actorType: "user",
    actorId: `user-${n % 100}`,
    action: "policy_evaluate",
    target: "context:clinical_notes",
    outcome: "success",
    requestId: `bench-${n}`,
    details: {
      decision: n % 5 === 0 ? "sanitize" : "allow",
      matched_rules: ["clinician-read", "phi-sanitize"],
      traits: ["role:clinician", "data_access:phi"],
      latency_us: 120 + (n % 50),
    },
  };
}

async function measure(db: Database, database: string, seconds: number): Promise<Row[]> {
  const rows: Row[] = [];
  let n = 0;
  const scenario = async (maxBatch: number, writers: number): Promise<LoadResult> => {
    const writer = createAuditWriter({ db, log: silentLogger, maxBatch });
    try {
      const name = maxBatch === 1 ? "one batch per event" : "group commit";
      return await runLoad(name, () => writer.write(decisionEvent(n++)), {
        concurrency: writers,
        seconds,
        warmupSeconds: Math.min(1, seconds / 4),
      });
    } finally {
      await writer.close();
    }
  };
  for (const writers of writerCounts) {
    const group = await scenario(512, writers);
    const single = await scenario(1, writers);
    rows.push({ database, writers, group, single });
  }
  return rows;
}

async function verifyLine(db: Database, database: string): Promise<string> {
  const started = performance.now();
  const report = await verifyAuditChain(db);
  const secs = (performance.now() - started) / 1000;
  const state = report.ok ? "intact" : `BROKEN at seq ${report.firstBroken.seq}`;
  return `- ${database}: \`audit verify\` read ${report.count} events in ${secs.toFixed(1)} s (${Math.round(report.count / secs)} events/s), chain ${state}`;
}

async function onPglite(seconds: number): Promise<{ rows: Row[]; verify: string }> {
  const { dir, remove: removeDir } = temporaryDir("traitgate-bench-audit-");
  const db = await openDatabase({ dataDir: dir, log: silentLogger });
  try {
    await migrate(db, silentLogger);
    const rows = await measure(db, "PGlite", seconds);
    return { rows, verify: await verifyLine(db, "PGlite") };
  } finally {
    await db.close();
    removeDir();
  }
}

async function onPostgres(
  seconds: number,
): Promise<{ rows: Row[]; verify: string } | { note: string }> {
  const url = process.env.BENCH_DATABASE_URL?.trim() || defaultUrl;
  const schema = `tg_bench_${randomBytes(6).toString("hex")}`;
  let db: Database;
  try {
    db = await openDatabase({
      connection: url,
      schema,
      acquireTimeoutMs: 3_000,
      poolSize: 10,
      log: silentLogger,
    });
    await db.ping();
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    return { note: `PostgreSQL skipped: could not connect (${reason}); set BENCH_DATABASE_URL.` };
  }
  // Interrupted: dropped over a connection of its own (the pool may be full of writers).
  const forget = onInterrupt(async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).finally(() => client.end());
  });
  try {
    await migrate(db, silentLogger);
    const rows = await measure(db, "PostgreSQL", seconds);
    return { rows, verify: await verifyLine(db, "PostgreSQL") };
  } finally {
    forget();
    await db.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
    await db.close();
  }
}

export async function benchAudit(seconds: number): Promise<string> {
  const rows: Row[] = [];
  const notes: string[] = [];
  const pglite = await onPglite(seconds);
  rows.push(...pglite.rows);
  notes.push(pglite.verify);
  const postgres = await onPostgres(seconds);
  if ("note" in postgres) notes.push(`- ${postgres.note}`);
  else {
    rows.push(...postgres.rows);
    notes.push(postgres.verify);
  }

  const fmt = (r: LoadResult) =>
    `${Math.round(r.rps)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)}${r.errors ? ` (${r.errors} errors)` : ""}`;
  const ratio = (row: Row) => (row.group.rps / row.single.rps).toFixed(1);
  const table = [
    "| database | writers | group commit events/s | p50 ms | p99 ms | one tx per event events/s | p50 ms | p99 ms | ratio |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map(
      (row) =>
        `| ${row.database} | ${row.writers} | ${fmt(row.group)} | ${fmt(row.single)} | ${ratio(row)}× |`,
    ),
  ];
  const at512 = rows
    .filter((row) => row.writers === 512)
    .map((row) => `${row.database} ${ratio(row)}×`)
    .join(", ");
  return [
    "## Audit log: group commit vs one batch per event",
    "",
    "Each event is chained (advisory lock, read the last hash, sha256) and committed before its",
    "caller's promise resolves; latencies are per event, from write() to commit.",
    "",
    ...table,
    "",
    `- ratio at 512 writers: ${at512} (target ≥ 10×)`,
    ...notes,
  ].join("\n");
}
