import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type AuditWriter,
  createAuditWriter,
  eventHash,
  runAuditVerifyCommand,
  verifyAuditChain,
} from "../../src/audit/index.js";
import { beforeFirstSeq, readEventsAfter } from "../../src/audit/store.js";
import { silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { countEvents, type StoredRow, sampleEvent, storedRows } from "./events.js";

describe.each(databaseTargets())("audit chain verification on $name", (target) => {
  let db: Database;
  let writer: AuditWriter;
  let rows: StoredRow[];

  beforeEach(async () => {
    db = await openTestDatabase(target);
    writer = createAuditWriter({ db, log: silentLogger, maxBatch: 4 });
    await Promise.all(Array.from({ length: 25 }, (_, i) => writer.write(sampleEvent(i))));
    rows = await storedRows(db);
  });
  afterEach(async () => {
    await writer.close();
    await db.close();
  });

  /** Changes stored events the way an owner or superuser could: append-only triggers off. */
  async function tamper(sql: string, params: unknown[] = []): Promise<void> {
    await db.session(async (session) => {
      await session.exec("ALTER TABLE audit_events DISABLE TRIGGER USER");
      try {
        const { rowCount } = await session.query(sql, params);
        expect(rowCount).toBeGreaterThan(0);
      } finally {
        await session.exec("ALTER TABLE audit_events ENABLE TRIGGER USER");
      }
    });
  }

  const row = (i: number): StoredRow => {
    const found = rows[i];
    if (!found) throw new Error(`no stored event ${i}`);
    return found;
  };

  it("accepts an intact chain, reading it page by page", async () => {
    const progress: number[] = [];
    const report = await verifyAuditChain(db, {
      pageSize: 7,
      onProgress: (n) => progress.push(n),
    });
    expect(report).toEqual({ ok: true, count: 25, head: { seq: row(24).seq, hash: row(24).hash } });
    expect(progress).toEqual([7, 14, 21, 25]);
  });

  it("accepts an empty log", async () => {
    const empty = await openTestDatabase(target);
    try {
      expect(await verifyAuditChain(empty)).toEqual({ ok: true, count: 0, head: null });
    } finally {
      await empty.close();
    }
  });

  it("names the event whose details changed by one byte", async () => {
    await tamper(
      "UPDATE audit_events SET details = jsonb_set(details, '{before,log_level}', '\"infp\"') WHERE id = $1",
      [row(11).id],
    );
    const report = await verifyAuditChain(db, { pageSize: 5 });
    expect(report).toMatchObject({
      ok: false,
      count: 11,
      firstBroken: { seq: row(11).seq, id: row(11).id, reason: "hash_mismatch" },
    });
  });

  it("names the event whose stored hash changed by one character", async () => {
    const hash = row(17).hash;
    const flipped = `${hash.slice(0, 10)}${hash[10] === "0" ? "1" : "0"}${hash.slice(11)}`;
    await tamper("UPDATE audit_events SET hash = $1 WHERE id = $2", [flipped, row(17).id]);
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      count: 17,
      firstBroken: { seq: row(17).seq, id: row(17).id, reason: "hash_mismatch" },
    });
  });

  it("names the event whose time, actor or outcome changed", async () => {
    for (const [i, change] of [
      [20, "occurred_at = occurred_at + interval '1 millisecond'"],
      [5, "actor_id = 'someone-else'"],
      [3, "outcome = 'failure'"],
    ] as const) {
      await tamper(`UPDATE audit_events SET ${change} WHERE id = $1`, [row(i).id]);
      expect(await verifyAuditChain(db)).toMatchObject({
        ok: false,
        firstBroken: { id: row(i).id, reason: "hash_mismatch" },
      });
    }
  });

  it("detects a deleted middle event at the event after it", async () => {
    await tamper("DELETE FROM audit_events WHERE id = $1", [row(9).id]);
    expect(await countEvents(db)).toBe(24);
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      count: 9,
      firstBroken: { seq: row(10).seq, id: row(10).id, reason: "prev_hash_mismatch" },
    });
  });

  it("detects deleted first events", async () => {
    await tamper("DELETE FROM audit_events WHERE id = $1", [row(0).id]);
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      count: 0,
      firstBroken: { id: row(1).id, reason: "prev_hash_mismatch" },
    });
  });

  it("detects a rewritten event whose hash was recomputed, at the next event", async () => {
    // The forger rewrites event 6 and gives it the right hash for its new contents, but
    // event 7 still names the old hash: every later hash would have to be recomputed too.
    const stored = (await readEventsAfter(db, beforeFirstSeq, 100))[6];
    if (!stored) throw new Error("no event 6");
    const forged = { ...stored, action: "settings_read" };
    await tamper("UPDATE audit_events SET action = $1, hash = $2 WHERE id = $3", [
      forged.action,
      eventHash(stored.prevHash, forged),
      stored.id,
    ]);
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      count: 7,
      firstBroken: { seq: row(7).seq, id: row(7).id, reason: "prev_hash_mismatch" },
    });
  });

  it("refuses UPDATE, DELETE and TRUNCATE (append-only)", async () => {
    await expect(
      db.query("UPDATE audit_events SET outcome = 'failure' WHERE id = $1", [row(0).id]),
    ).rejects.toMatchObject({ code: "42501" });
    await expect(db.query("DELETE FROM audit_events WHERE id = $1", [row(0).id])).rejects.toThrow(
      /append-only/,
    );
    await expect(db.query("TRUNCATE audit_events")).rejects.toThrow(/append-only/);
    expect(await countEvents(db)).toBe(25);
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 25 });
  });

  it("`audit verify` prints progress and a final line, and exits 0 or 1 naming the event", async () => {
    let out = "";
    const sink = { write: (text: string) => (out += text) };
    expect(await runAuditVerifyCommand(db, sink, { progressEvery: 10, pageSize: 5 })).toBe(0);
    expect(out.split("\n").filter(Boolean)).toEqual([
      "audit verify: 10 events checked",
      "audit verify: 20 events checked",
      expect.stringMatching(
        new RegExp(`^audit chain intact: 25 events in [0-9.]+ s; head seq ${row(24).seq}, `),
      ),
      expect.stringMatching(/^audit checkpoints: none verified; events removed from the end/),
    ]);

    await tamper("UPDATE audit_events SET target = 'settingz' WHERE id = $1", [row(13).id]);
    out = "";
    expect(await runAuditVerifyCommand(db, sink)).toBe(1);
    expect(out).toContain(`BROKEN at event seq ${row(13).seq} (id ${row(13).id}): hash_mismatch`);
  });
});
