import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AuditWriter, createAuditWriter, verifyAuditChain } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { type Database, openDatabase, type Queryable } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase, testSchemaName } from "../support/database.js";

/**
 * QueryOptions.prepareAs (docs/architecture.md, "Prepared statements"): the statement is
 * kept parsed and planned under its name on the connection, on both drivers, and answers
 * as the same statement unprepared does.
 */

const typed =
  "SELECT $1::int8 + 1 AS n, $2::jsonb AS j, $3::text[] AS t, $4::text AS missing, " +
  "'2024-01-02T03:04:05Z'::timestamptz AS at";
const params = ["41", '{"k":[1]}', ["a", "b"], null];

/** The statements prepared on the connection that runs `on`'s queries (one session). */
async function preparedNames(on: Queryable): Promise<string[]> {
  const { rows } = await on.query<{ name: string }>(
    "SELECT name FROM pg_prepared_statements ORDER BY name",
  );
  return rows.map((row) => row.name);
}

describe.each(databaseTargets())("prepared statements on $name", (target) => {
  let db: Database;
  let writer: AuditWriter;
  beforeAll(async () => {
    db = await openTestDatabase(target);
    writer = createAuditWriter({ db, log: silentLogger });
  });
  afterAll(async () => {
    await writer?.close();
    await db?.close();
  });

  it("keeps the statement prepared under its name, with the same answer as unprepared", async () => {
    const plain = await db.query(typed, params);
    await db.transaction(async (tx) => {
      expect(await preparedNames(tx)).not.toContain("traitgate_test_typed");
      for (let i = 0; i < 3; i++) {
        const prepared = await tx.query(typed, params, { prepareAs: "traitgate_test_typed" });
        expect(prepared).toEqual(plain);
      }
      expect(await preparedNames(tx)).toContain("traitgate_test_typed");
    });
    expect(plain.rows).toEqual([
      { n: "42", j: { k: [1] }, t: ["a", "b"], missing: null, at: expect.any(Date) },
    ]);
  });

  it("answers 40 parallel first uses of a new name, each with its own parameters", async () => {
    // On PostgreSQL these spread over the pool's connections, each preparing it for itself.
    const name = { prepareAs: "traitgate_test_parallel" };
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        db.query<{ n: string; s: string }>(
          "SELECT $1::int8 * 2 AS n, $2::text AS s",
          [String(i), `caller-${i}`],
          name,
        ),
      ),
    );
    expect(answers.map((a) => a.rows)).toEqual(
      Array.from({ length: 40 }, (_, i) => [{ n: String(i * 2), s: `caller-${i}` }]),
    );
  });

  it("fails a bad parameter as the unprepared statement does, with no params attached, and goes on", async () => {
    const name = { prepareAs: "traitgate_test_int" };
    const bad = await db.query("SELECT $1::int8 AS n", ["not-a-number"], name).catch((e) => e);
    expect(bad).toMatchObject({ code: "22P02" });
    // (The server's own message quotes the value, as for any statement: log lines keep
    // message and code only where details could hold row values.)
    expect((bad as { params?: unknown }).params).toBeUndefined();
    expect((bad as { queryOptions?: unknown }).queryOptions).toBeUndefined();
    expect((await db.query("SELECT $1::int8 AS n", ["7"], name)).rows).toEqual([{ n: "7" }]);
    // Inside a transaction the failure aborts it, as any failed statement does.
    await expect(
      db.transaction(async (tx) => {
        await tx.query("SELECT $1::int8 AS n", ["x"], name);
      }),
    ).rejects.toMatchObject({ code: "22P02" });
    expect((await db.query("SELECT $1::int8 AS n", ["8"], name)).rows).toEqual([{ n: "8" }]);
  });

  it("refuses a second text under a name, and a name outside traitgate_", async () => {
    await db.query("SELECT 1 AS one", [], { prepareAs: "traitgate_test_once" });
    await expect(
      db.query("SELECT 2 AS two", [], { prepareAs: "traitgate_test_once" }),
    ).rejects.toThrow(/different statement/);
    await expect(db.query("SELECT 1", [], { prepareAs: "Robert'); --" })).rejects.toThrow(
      /invalid prepared statement name/,
    );
  });

  it("prepares again after a session reset deallocated it", async () => {
    const name = { prepareAs: "traitgate_test_reset" };
    await db.session(async (session) => {
      expect((await session.query("SELECT $1::text AS v", ["a"], name)).rows).toEqual([{ v: "a" }]);
      await session.exec("DEALLOCATE ALL");
      // Deallocated behind the driver's back within the session: PGlite prepares it again;
      // on PostgreSQL the session's connection is closed at its end, whatever happened.
      if (target.name === "pglite") {
        expect((await session.query("SELECT $1::text AS v", ["b"], name)).rows).toEqual([
          { v: "b" },
        ]);
      }
    });
    expect((await db.query("SELECT $1::text AS v", ["c"], name)).rows).toEqual([{ v: "c" }]);
  });

  it("prepares a statement again after a session's reset, also where its first use is in a transaction", async () => {
    const name = { prepareAs: "traitgate_test_after_session" };
    expect((await db.query("SELECT $1::text AS v", ["a"], name)).rows).toEqual([{ v: "a" }]);
    // The session's end resets it (DISCARD ALL on PGlite): every statement is deallocated.
    await db.session(async (session) => {
      await session.query("SELECT 1");
    });
    // Inside a transaction a stale statement cannot be retried (its failure aborts the
    // transaction): the driver must know the reset deallocated it.
    const got = await db.transaction((tx) => tx.query("SELECT $1::text AS v", ["b"], name));
    expect(got.rows).toEqual([{ v: "b" }]);
  });

  it.runIf(target.name === "pglite")(
    "fails a statement deallocated inside a transaction, then prepares it again",
    async () => {
      const name = { prepareAs: "traitgate_test_in_tx" };
      await expect(
        db.transaction(async (tx) => {
          await tx.query("SELECT $1::text AS v", ["a"], name);
          await tx.exec("DEALLOCATE ALL");
          await tx.query("SELECT $1::text AS v", ["b"], name);
        }),
      ).rejects.toMatchObject({ reason: "DATABASE_UNAVAILABLE" });
      expect((await db.query("SELECT $1::text AS v", ["c"], name)).rows).toEqual([{ v: "c" }]);
    },
  );

  it.runIf(target.name === "postgres")(
    "closes a pooled connection whose statement was deallocated, and prepares it on a new one",
    async () => {
      const schema = testSchemaName();
      const single = await openDatabase({
        connection: process.env.TEST_DATABASE_URL ?? "",
        schema,
        poolSize: 1,
        acquireTimeoutMs: 2_000,
        log: silentLogger,
      });
      try {
        const name = { prepareAs: "traitgate_test_stale" };
        await single.query("SELECT $1::text AS v", ["a"], name);
        // The transaction ends normally: its connection goes back to the pool as it is.
        await single.transaction((tx) => tx.exec("DEALLOCATE ALL"));
        await expect(single.query("SELECT $1::text AS v", ["b"], name)).rejects.toMatchObject({
          reason: "DATABASE_UNAVAILABLE",
        });
        expect((await single.query("SELECT $1::text AS v", ["c"], name)).rows).toEqual([
          { v: "c" },
        ]);
      } finally {
        await single.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await single.close();
      }
    },
  );

  it("appends audit events through prepared statements; the chain verifies", async () => {
    await db.transaction(async (tx) => {
      await writer.writeIn(tx, {
        actorType: "user",
        actorId: "u1",
        action: "settings_update",
        target: "settings",
        outcome: "success",
        details: { changed: ["rag.top_k_default"] },
      });
      expect(await preparedNames(tx)).toContain("traitgate_audit_append");
    });
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        writer.write({
          actorType: "user",
          actorId: `u${i}`,
          action: "policy_evaluate",
          target: "context:search",
          outcome: "success",
          details: { decision: "allow" },
        }),
      ),
    );
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 21 });
  });
});
