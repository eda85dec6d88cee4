import { generateKeyPairSync } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { auditChainState, createChainStateReader } from "../../src/audit/chain-state.js";
import {
  type AuditWriter,
  type CheckpointKeys,
  checkpointKeysFrom,
  createAuditCheckpoints,
  createAuditWriter,
} from "../../src/audit/index.js";
import { beforeFirstSeq, readEventsAfter } from "../../src/audit/store.js";
import { silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { sampleEvent } from "./events.js";

function newKeys(): CheckpointKeys {
  const pem = generateKeyPairSync("ed25519").privateKey.export({ format: "pem", type: "pkcs8" });
  const problems: string[] = [];
  const keys = checkpointKeysFrom({ AUDIT_CHECKPOINT_KEY: String(pem) }, problems);
  expect(problems).toEqual([]);
  return keys;
}

/**
 * The console's view of the chain (GetAuditChainState): the newest checkpoint checked, and a
 * verification from its signed head that reads at most `maxEvents` events.
 */
describe.each(databaseTargets())("audit chain state on $name", (target) => {
  let db: Database;
  let writer: AuditWriter;
  let keys: CheckpointKeys;

  beforeEach(async () => {
    db = await openTestDatabase(target);
    writer = createAuditWriter({ db, log: silentLogger });
    keys = newKeys();
  });
  afterEach(async () => {
    await writer.close();
    await db.close();
  });

  it("shares one computation between calls that arrive while it runs", async () => {
    await write(30);
    let statements = 0;
    const counted = {
      query: ((sql: string, params?: readonly unknown[]) => {
        statements++;
        return db.query(sql, params);
      }) as Database["query"],
    };
    const read = createChainStateReader(counted, { trusted: [], maxEvents: 1000 });
    const one = await read();
    const alone = statements;
    expect(one.verification).toMatchObject({ state: "verified", checked: 30 });
    statements = 0;
    const many = await Promise.all(Array.from({ length: 40 }, () => read()));
    expect(statements).toBe(alone);
    for (const answer of many) expect(answer).toEqual(one);
    // Once answered, the next call works it out again (new events are seen).
    await write(2, 30);
    expect((await read()).verification.checked).toBe(32);
  });

  const write = (n: number, from = 0) =>
    Promise.all(Array.from({ length: n }, (_, i) => writer.write(sampleEvent(from + i))));
  const checkpoint = () =>
    createAuditCheckpoints({ db, key: keys.signing, intervalMs: 0, log: silentLogger }).checkpoint(
      "interval",
    );
  async function tamper(sql: string, params: unknown[] = []): Promise<void> {
    await db.session(async (session) => {
      await session.exec("ALTER TABLE audit_events DISABLE TRIGGER USER");
      try {
        await session.query(sql, params);
      } finally {
        await session.exec("ALTER TABLE audit_events ENABLE TRIGGER USER");
      }
    });
  }

  it("verifies from the first event while there is no checkpoint, within the bound", async () => {
    expect(await auditChainState(db, { trusted: keys.trusted })).toMatchObject({
      head: undefined,
      checkpoint: undefined,
      verification: { state: "verified", start: "genesis", checked: 0, unchecked: 0 },
    });
    await write(12);
    expect((await auditChainState(db, { trusted: keys.trusted })).verification).toMatchObject({
      state: "verified",
      start: "genesis",
      checked: 12,
      unchecked: 0,
    });
    expect(
      (await auditChainState(db, { trusted: keys.trusted, maxEvents: 5 })).verification,
    ).toMatchObject({ state: "partial", start: "genesis", checked: 5, unchecked: 7 });
  });

  it("starts after the newest valid checkpoint's head, and reads only what follows it", async () => {
    await write(20);
    const signed = await checkpoint();
    await write(3, 20);
    const state = await auditChainState(db, { trusted: keys.trusted, maxEvents: 10 });
    expect(state.checkpoint).toMatchObject({ status: "valid", checkpoint: { seq: signed?.seq } });
    // The checkpoint event and the three after it: well within the bound of 10.
    expect(state.verification).toMatchObject({
      state: "verified",
      start: "checkpoint",
      startSeq: signed?.seq,
      checked: 4,
      unchecked: 0,
    });
    const rows = await readEventsAfter(db, beforeFirstSeq, 100);
    expect(state.head).toEqual({ seq: rows.at(-1)?.seq, hash: rows.at(-1)?.hash });
  });

  it("reports a checkpoint signed with an unknown key, and then starts from the first event", async () => {
    await write(4);
    await checkpoint();
    const state = await auditChainState(db, { trusted: newKeys().trusted });
    expect(state.checkpoint?.status).toBe("unknown_key");
    expect(state.verification).toMatchObject({ state: "verified", start: "genesis", checked: 5 });
  });

  it("names the first broken event after the checkpoint", async () => {
    await write(6);
    await checkpoint();
    await write(4, 6);
    const rows = await readEventsAfter(db, beforeFirstSeq, 100);
    const changed = rows.at(-2);
    await tamper("UPDATE audit_events SET outcome = 'failure' WHERE id = $1", [changed?.id]);
    const state = await auditChainState(db, { trusted: keys.trusted });
    expect(state.verification).toMatchObject({
      state: "broken",
      start: "checkpoint",
      broken: { seq: changed?.seq, reason: "hash_mismatch" },
    });
  });

  it("does not trust a checkpoint whose signed head was rewritten", async () => {
    await write(6);
    const signed = await checkpoint();
    await tamper("UPDATE audit_events SET outcome = 'failure' WHERE seq = $1", [signed?.seq]);
    const state = await auditChainState(db, { trusted: keys.trusted });
    expect(state.checkpoint?.status).toBe("wrong_head");
    expect(state.verification).toMatchObject({
      state: "broken",
      start: "genesis",
      broken: { seq: signed?.seq, reason: "hash_mismatch" },
    });
  });
});
