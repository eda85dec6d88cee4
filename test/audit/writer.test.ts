import { Writable } from "node:stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type AppendedEvent,
  type AuditWriter,
  createAuditWriter,
  genesisHash,
  verifyAuditChain,
} from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import { createLogger, silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { countEvents, sampleEvent, storedRows } from "./events.js";

describe.each(databaseTargets())("audit writer on $name", (target) => {
  let db: Database;
  beforeEach(async () => {
    db = await openTestDatabase(target);
  });
  afterEach(async () => {
    await db.close();
  });

  it("commits 200 concurrent writes in a few transactions as one chain that verifies", async () => {
    const writer = createAuditWriter({ db, log: silentLogger });
    // One write starts a transaction; the rest arrive while it runs and must queue behind it.
    const first = writer.write(sampleEvent(0));
    await new Promise((resolve) => setImmediate(resolve));
    const rest = Array.from({ length: 199 }, (_, i) => writer.write(sampleEvent(i + 1)));
    const results = await Promise.all([first, ...rest]);

    expect(await countEvents(db)).toBe(200);
    const stats = writer.stats();
    expect(stats.events).toBe(200);
    expect(stats.transactions).toBeGreaterThanOrEqual(2);
    expect(stats.transactions).toBeLessThanOrEqual(5);
    expect(stats.failedTransactions).toBe(0);

    // Each caller got its own event's id, seq and hash, in commit order.
    const rows = await storedRows(db);
    const byId = new Map(rows.map((row) => [row.id, row]));
    for (const result of results) {
      expect(byId.get(result.id)).toMatchObject({ seq: result.seq, hash: result.hash });
    }
    expect(rows[0]?.prev_hash).toBe(genesisHash);
    expect(await verifyAuditChain(db)).toEqual({
      ok: true,
      count: 200,
      head: { seq: rows.at(-1)?.seq, hash: rows.at(-1)?.hash },
    });
    await writer.close();
  });

  it("takes at most maxBatch events per transaction", async () => {
    const writer = createAuditWriter({ db, log: silentLogger, maxBatch: 50 });
    await Promise.all(Array.from({ length: 200 }, (_, i) => writer.write(sampleEvent(i))));
    expect(writer.stats()).toEqual({
      transactions: 4,
      failedTransactions: 0,
      events: 200,
      largestBatch: 50,
      refusedQueueFull: 0,
      queued: 0,
    });
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 200 });
  });

  it("tells its observer of each batch once (size, time, outcome) and shows what is queued", async () => {
    const batches: { events: number; seconds: number; ok: boolean; queued: number }[] = [];
    const writer: AuditWriter = createAuditWriter({
      db,
      log: silentLogger,
      maxBatch: 50,
      observe: {
        // Told as each batch ends, before the next one is taken from the queue.
        batch: (events, seconds, ok) =>
          batches.push({ events, seconds, ok, queued: writer.stats().queued }),
      },
    });
    await Promise.all(Array.from({ length: 120 }, (_, i) => writer.write(sampleEvent(i))));
    expect(batches.map((b) => [b.events, b.ok, b.queued])).toEqual([
      [50, true, 70],
      [50, true, 20],
      [20, true, 0],
    ]);
    expect(batches.every((b) => b.seconds > 0)).toBe(true);
    expect(writer.stats().queued).toBe(0);
    await writer.close();
  });

  it("commits a batch in one statement, not a transaction of several round trips", async () => {
    const statements: string[] = [];
    const counting: Database = Object.create(db, {
      query: {
        value: (sql: string, params?: readonly unknown[]) => {
          statements.push(sql);
          return db.query(sql, params);
        },
      },
      transaction: {
        value: (fn: Parameters<Database["transaction"]>[0]) => {
          statements.push("BEGIN");
          return db.transaction(fn);
        },
      },
    });
    const writer = createAuditWriter({ db: counting, log: silentLogger });
    await Promise.all(Array.from({ length: 20 }, (_, i) => writer.write(sampleEvent(i))));
    expect(writer.stats()).toMatchObject({ transactions: 1, events: 20 });
    expect(statements).toHaveLength(1);
    expect(statements[0]).toMatch(/audit_append/);
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 20 });
    await writer.close();
  });

  it("writeIn appends inside the caller's transaction: committed with it, or rolled back with it", async () => {
    const writer = createAuditWriter({ db, log: silentLogger });
    await writer.write(sampleEvent(0));
    const kept = await db.transaction((tx) => writer.writeIn(tx, sampleEvent(1)));
    await expect(
      db.transaction(async (tx) => {
        await writer.writeIn(tx, sampleEvent(2));
        throw new Error("the change failed");
      }),
    ).rejects.toThrow("the change failed");
    await writer.write(sampleEvent(3));
    const rows = await storedRows(db);
    expect(rows.map((row) => row.id)).toHaveLength(3);
    expect(rows[1]).toMatchObject({ id: kept.id, seq: kept.seq, hash: kept.hash });
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 3 });
    await writer.close();
  });

  it("refuses writes at once beyond maxQueued waiting events, and commits the rest", async () => {
    const writer = createAuditWriter({ db, log: silentLogger, maxQueued: 10 });
    const results = await Promise.allSettled(
      Array.from({ length: 15 }, (_, i) => writer.write(sampleEvent(i))),
    );
    const refused = results.filter((r) => r.status === "rejected");
    expect(refused.length).toBe(5);
    expect((refused[0] as PromiseRejectedResult).reason).toMatchObject({
      reason: "AUDIT_UNAVAILABLE",
    });
    expect(writer.stats()).toMatchObject({ events: 10, refusedQueueFull: 5 });
    await writer.close();
  });

  it("chains across transactions and across writers on one database", async () => {
    const one = createAuditWriter({ db, log: silentLogger, maxBatch: 3 });
    const two = createAuditWriter({ db, log: silentLogger, maxBatch: 5 });
    for (let round = 0; round < 4; round++) {
      await Promise.all(
        Array.from({ length: 12 }, (_, i) => (i % 2 ? one : two).write(sampleEvent(i))),
      );
      await one.write(sampleEvent(100 + round));
    }
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 52 });
  });

  it("rejects every caller of a failed batch and stores none of it; the next batch works", async () => {
    // An insert trigger that fails the whole statement when one event says so.
    await db.exec(`
      CREATE FUNCTION audit_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.action = 'boom' THEN RAISE EXCEPTION 'injected failure'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER audit_test_fail BEFORE INSERT ON audit_events
        FOR EACH ROW EXECUTE FUNCTION audit_test_fail();`);
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const log = createLogger({ level: "debug", destination });
    const batches: [number, boolean][] = [];
    const writer = createAuditWriter({
      db,
      log,
      observe: { batch: (events, _seconds, ok) => batches.push([events, ok]) },
    });
    await writer.write(sampleEvent(0));

    const secret = "details-value-that-must-not-be-logged";
    const batch = Array.from({ length: 20 }, (_, i) =>
      writer.write(sampleEvent(i, i === 13 ? { action: "boom" } : { details: { note: secret } })),
    );
    const settled = await Promise.allSettled(batch);
    for (const result of settled) {
      expect(result.status).toBe("rejected");
      const reason = (result as PromiseRejectedResult).reason as unknown;
      expect(reason).toBeInstanceOf(DomainError);
      expect(reason).toMatchObject({ kind: "unavailable", reason: "AUDIT_UNAVAILABLE" });
    }
    expect(await countEvents(db)).toBe(1);
    expect(writer.stats()).toMatchObject({ transactions: 2, failedTransactions: 1, events: 1 });
    expect(batches).toEqual([
      [1, true],
      [20, false],
    ]);
    expect(lines.join("")).toContain("audit batch could not be written");
    expect(lines.join("")).not.toContain(secret);

    await writer.write(sampleEvent(21));
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 2 });
  });

  it("rejects a malformed event alone; the rest of its tick commits", async () => {
    const writer = createAuditWriter({ db, log: silentLogger });
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const results = await Promise.allSettled([
      writer.write(sampleEvent(1)),
      writer.write(sampleEvent(2, { details: cyclic })),
      writer.write(sampleEvent(3, { outcome: "maybe" as "success" })),
      writer.write(sampleEvent(4)),
    ]);
    expect(results.map((result) => result.status)).toEqual([
      "fulfilled",
      "rejected",
      "rejected",
      "fulfilled",
    ]);
    expect(await countEvents(db)).toBe(2);
    expect(writer.stats().transactions).toBe(1);
  });

  it("redacts secrets and personal data before storing (and hashing) them", async () => {
    const writer = createAuditWriter({ db, log: silentLogger });
    const secrets = {
      password: "correct-horse-battery",
      totp_code: "493817",
      token: "tok-abcdef-123",
      api_key: "tg_key_0123456789",
      email: "patient@example.org",
    };
    await writer.write(
      sampleEvent(1, {
        details: {
          ...secrets,
          before: { user: { refreshToken: "refresh-secret-1", roles: ["viewer"] } },
          calls: [{ payload: { diagnosis: "confidential-diagnosis" }, payload_size: 42 }],
          authorization: "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
        },
      }),
    );
    const { rows } = await db.query<{ row: string }>(
      "SELECT row_to_json(a)::text AS row FROM audit_events a",
    );
    const stored = rows[0]?.row ?? "";
    for (const value of [
      ...Object.values(secrets),
      "refresh-secret-1",
      "confidential-diagnosis",
      "eyJhbGciOiJIUzI1NiJ9",
    ]) {
      expect(stored).not.toContain(value);
    }
    expect(stored).toContain("[redacted]");
    expect(stored).toContain("viewer");
    expect(stored).toContain('"payload_size": 42');
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 1 });
  });

  it("hashes exactly what the database gives back: jsonb numbers, keys, text, time", async () => {
    let now = Date.UTC(2025, 5, 30, 23, 59, 59, 999);
    const writer = createAuditWriter({ db, log: silentLogger, clock: { now: () => now++ + 0.7 } });
    const tricky = {
      big: 1e21,
      small: 1e-7,
      tenth: 0.1,
      negativeZero: -0,
      max: Number.MAX_SAFE_INTEGER + 2,
      float: 1.5e300,
      text: 'quote " backslash \\ tab \t newline \n \u0001 é 漢字 😀',
      nul: "a\0b",
      lone: "x\uD800y",
      "": "empty key",
      é: { b: 1, a: 2, aa: 3, B: 4 },
      nested: [[], {}, [null, true, false]],
      ...JSON.parse('{"__proto__": "own"}'),
    };
    await writer.write(
      sampleEvent(1, { details: tricky, target: "t\0arget", actorId: "\uDC00", requestId: null }),
    );
    await writer.write(sampleEvent(2, { actorType: "anonymous", actorId: null, target: null }));
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 2 });
    const { rows } = await db.query<{ at: string; details: string }>(
      `SELECT to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS at,
              details::text AS details FROM audit_events ORDER BY seq`,
    );
    expect(rows.map((row) => row.at)).toEqual([
      "2025-06-30T23:59:59.999000",
      "2025-07-01T00:00:00.000000",
    ]);
    expect(JSON.parse(rows[0]?.details ?? "")).toMatchObject({ __proto__: "own", nul: "a\uFFFDb" });
  });

  it("close() waits for queued events; later writes are refused", async () => {
    const writer = createAuditWriter({ db, log: silentLogger });
    const pending = Array.from({ length: 10 }, (_, i) => writer.write(sampleEvent(i)));
    await writer.close();
    expect(await countEvents(db)).toBe(10);
    const results: AppendedEvent[] = await Promise.all(pending);
    expect(results).toHaveLength(10);
    await expect(writer.write(sampleEvent(11))).rejects.toMatchObject({
      reason: "AUDIT_UNAVAILABLE",
    });
  });
});
