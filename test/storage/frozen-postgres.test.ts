import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAuditWriter } from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate, openDatabase } from "../../src/storage/index.js";
import {
  createPgCluster,
  type PgCluster,
  privateClustersAvailable,
} from "../support/pg-cluster.js";
import { until } from "../support/wait.js";

/**
 * The database handle on a private PostgreSQL cluster that the test freezes (SIGSTOP:
 * connections accepted, no answers): every statement, transaction and audit write fails with
 * DATABASE_UNAVAILABLE within the acquire and statement timeouts, connections that timed out
 * are closed rather than pooled again, and everything works once the cluster resumes.
 */

const available = privateClustersAvailable("frozen PostgreSQL");

const acquireTimeoutMs = 1_000;
const statementTimeoutMs = 1_500;
/** acquire + statement: the documented bound; plus a margin for a busy machine. */
const boundMs = acquireTimeoutMs + statementTimeoutMs + 1_000;

const unavailable = { kind: "unavailable", reason: "DATABASE_UNAVAILABLE", retryAfterSeconds: 1 };

/** How long `work` took to settle, and how it settled. */
async function settle<T>(work: Promise<T>): Promise<{ ms: number; error: unknown }> {
  const started = performance.now();
  const error = await work.then(
    () => undefined,
    (err: unknown) => err ?? new Error("rejected without a reason"),
  );
  return { ms: performance.now() - started, error };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The first defined value `probe` gives (a failure counts as none), polling for 15 s. */
async function eventually<T>(probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = performance.now() + 15_000;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error("not within 15 s");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe.skipIf(!available)("PostgreSQL that accepts connections and never answers", () => {
  let cluster: PgCluster;
  let db: Database;

  beforeAll(async () => {
    cluster = await createPgCluster();
    db = await openDatabase({
      connection: cluster.url,
      acquireTimeoutMs,
      statementTimeoutMs,
      poolSize: 2,
      log: silentLogger,
    });
    await migrate(db, silentLogger);
    await db.exec("CREATE TABLE outage_rows (v int)");
  });

  afterAll(async () => {
    await cluster?.resume();
    await db?.close();
    await cluster?.drop();
  });

  it("bounds statements on the server too, while sessions may run longer", async () => {
    const slow = `SELECT pg_sleep(${(statementTimeoutMs + 500) / 1000})`;
    const timedOut = await settle(db.query(slow));
    expect(timedOut.error).toMatchObject(unavailable);
    expect(timedOut.ms).toBeLessThan(boundMs);
    await expect(db.transaction((tx) => tx.query(slow))).rejects.toMatchObject(unavailable);
    // Maintenance (migrations, index builds) runs in sessions, which are not bounded.
    await db.session((session) => session.query(slow));
    await expect(db.query("SELECT 1 AS one")).resolves.toMatchObject({ rows: [{ one: 1 }] });
  });

  it("fails statements, transactions and audit writes in time while frozen", async () => {
    const writer = createAuditWriter({ db, log: silentLogger });
    const event = (n: number) => ({
      actorType: "system" as const,
      action: "outage_test",
      outcome: "success" as const,
      details: { n },
    });
    await writer.write(event(0));
    // The freeze comes in the middle of a transaction: the statement that gets no answer
    // ends it (no ROLLBACK waited for), its connection is closed, and later statements on it
    // are refused at once.
    let afterTimeout: unknown;
    const tx = await settle(
      db.transaction(async (t) => {
        await t.query("INSERT INTO outage_rows VALUES (1)");
        await cluster.freeze();
        try {
          await t.query("INSERT INTO outage_rows VALUES (2)");
        } catch (err) {
          afterTimeout = await t.query("SELECT 1").then(
            () => "answered",
            (e: unknown) => e,
          );
          throw err;
        }
      }),
    );
    try {
      expect(tx.error).toMatchObject(unavailable);
      expect(tx.ms).toBeLessThan(boundMs);
      expect(afterTimeout).toBeInstanceOf(Error);

      // More at once than the pool holds: the third waits for a connection, and gets none.
      const queries = await Promise.all([1, 2, 3].map(() => settle(db.query("SELECT 1"))));
      for (const q of queries) {
        expect(q.error).toMatchObject(unavailable);
        expect(q.error).toBeInstanceOf(DomainError);
        expect(q.ms).toBeLessThan(boundMs);
      }

      // Group commit: the events queued behind a batch that gets no answer are refused
      // with it, not tried in another transaction after it.
      const transactionsBefore = writer.stats().transactions;
      const first = settle(writer.write(event(1)));
      await new Promise((resolve) => setImmediate(resolve)); // its batch is under way
      const queued = [2, 3, 4].map((n) => settle(writer.write(event(n))));
      for (const write of [await first, ...(await Promise.all(queued))]) {
        expect(write.error).toMatchObject(unavailable);
        expect(write.ms).toBeLessThan(boundMs);
      }
      expect(writer.stats().transactions - transactionsBefore).toBe(1);

      // Inside a transaction (writeIn), the same answer.
      const inTx = await settle(db.transaction((t) => writer.writeIn(t, event(5))));
      expect(inTx.error).toMatchObject(unavailable);
    } finally {
      await cluster.resume();
    }

    // Back: the pool serves again (no connection was left hanging in it), the audit log
    // takes events, and nothing of the transaction that timed out was applied.
    await expect(db.query("SELECT 1 AS one")).resolves.toMatchObject({ rows: [{ one: 1 }] });
    await Promise.all([1, 2, 3].map(() => db.query("SELECT 1")));
    await writer.write(event(6));
    const { rows } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM outage_rows");
    expect(rows[0]?.n).toBe("0");
    await writer.close();
  });

  it("stays up when the server process under a statement dies", async () => {
    const running = settle(db.query("SELECT pg_sleep(1.2) AS the_statement_to_kill"));
    const pid = await eventually(async () => {
      const { rows } = await db.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE '%the_statement_to_kill' AND pid <> pg_backend_pid()",
      );
      return rows[0]?.pid;
    });
    const { rows: before } = await db.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE pid <> $1",
      [pid],
    );
    // No goodbye on the connection: it just closes (the postmaster then restarts the rest).
    process.kill(pid, "SIGKILL");
    expect((await running).error).toMatchObject(unavailable);
    // Done only when the restart is: the postmaster has ended every other server process of
    // before (a pooled connection answers until then), and a new connection is let in (none is
    // while it recovers). A later freeze or stop in the middle of recovery breaks the next test.
    await until(() => before.every(({ pid: other }) => !alive(other)), 15_000);
    await eventually(() => db.query("SELECT 1").then(() => true));
  });

  it("keeps listening across a freeze, and reconnects after a restart", async () => {
    const received: string[] = [];
    let reconnects = 0;
    const subscription = await db.listen("outage_channel", {
      onNotification: (payload) => received.push(payload),
      onReconnect: () => reconnects++,
    });
    const notify = (payload: string) =>
      db.transaction((tx) => tx.query("SELECT pg_notify('outage_channel', $1)", [payload]));
    try {
      await cluster.freeze();
      await expect(notify("lost")).rejects.toMatchObject(unavailable);
      await cluster.resume();
      await notify("after freeze");
      await until(() => received.includes("after freeze"), 10_000);

      // A statement under way when the server shuts down fails (the process stays up).
      const inFlight = settle(db.query("SELECT pg_sleep(1)"));
      await new Promise((resolve) => setTimeout(resolve, 200)); // most likely under way by now
      await cluster.stop();
      expect((await inFlight).error).toMatchObject(unavailable);
      await expect(notify("stopped")).rejects.toMatchObject(unavailable);
      await cluster.start();
      await until(() => reconnects > 0, 15_000);
      await notify("after restart");
      await until(() => received.includes("after restart"), 10_000);
    } finally {
      await subscription.close();
    }
  });
});
