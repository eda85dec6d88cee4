import { generateKeyPairSync } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type AuditWriter,
  type Checkpoint,
  type CheckpointKeys,
  checkpointJson,
  checkpointKeysFrom,
  createAuditCheckpoints,
  createAuditWriter,
  eventHash,
  runAuditVerifyCommand,
  signCheckpoint,
} from "../../src/audit/index.js";
import { beforeFirstSeq, readEventsAfter, type StoredEvent } from "../../src/audit/store.js";
import { createLogger, silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { sampleEvent } from "./events.js";

/** A new signing key; `previous` are public keys (PEM) still trusted. */
function newKeys(previous: string[] = []): CheckpointKeys {
  const pem = generateKeyPairSync("ed25519").privateKey.export({ format: "pem", type: "pkcs8" });
  const problems: string[] = [];
  const keys = checkpointKeysFrom(
    { AUDIT_CHECKPOINT_KEY: String(pem), AUDIT_CHECKPOINT_KEY_PREVIOUS: previous.join("\n") },
    problems,
  );
  expect(problems).toEqual([]);
  return keys;
}

const publicPem = (keys: CheckpointKeys) =>
  String(keys.signing?.publicKey.export({ format: "pem", type: "spki" }));

describe.each(databaseTargets())("audit checkpoints on $name", (target) => {
  let db: Database;
  let writer: AuditWriter;
  let keys: CheckpointKeys;
  let logs: string[];

  beforeEach(async () => {
    db = await openTestDatabase(target);
    writer = createAuditWriter({ db, log: silentLogger });
    keys = newKeys();
    logs = [];
  });
  afterEach(async () => {
    await writer.close();
    await db.close();
  });

  const checkpointer = (signing = keys, intervalMs = 0) =>
    createAuditCheckpoints({
      db,
      key: signing.signing,
      intervalMs,
      log: createLogger({ level: "info", destination: { write: (l: string) => logs.push(l) } }),
    });

  async function verify(options: Parameters<typeof runAuditVerifyCommand>[2] = {}) {
    let out = "";
    const sink = { write: (text: string) => (out += text) };
    const code = await runAuditVerifyCommand(db, sink, { trustedKeys: keys.trusted, ...options });
    return { code, out };
  }

  const write = (n: number, from = 0) =>
    Promise.all(Array.from({ length: n }, (_, i) => writer.write(sampleEvent(from + i))));
  const events = () => readEventsAfter(db, beforeFirstSeq, 1000);
  const at = (rows: StoredEvent[], i: number): StoredEvent => {
    const row = rows.at(i);
    if (row === undefined) throw new Error(`no event ${i}`);
    return row;
  };

  /** Runs SQL as the table's owner could (append-only triggers off). */
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

  it("signs the head right after it, only when it moved, and logs the signed content", async () => {
    const checkpoints = checkpointer();
    expect(await checkpoints.checkpoint("interval")).toBeUndefined(); // empty log
    await write(5);
    const head = at(await events(), -1);
    const first = await checkpoints.checkpoint("interval");
    expect(first).toMatchObject({ seq: head.seq, hash: head.hash, keyId: keys.signing?.keyId });
    expect(await checkpoints.checkpoint("interval")).toBeUndefined(); // nothing new
    await write(2, 5);
    await checkpoints.close();

    const rows = await events();
    expect(rows.map((r) => r.action)).toEqual([
      ...Array.from({ length: 5 }, () => "settings_update"),
      "audit_checkpoint",
      "settings_update",
      "settings_update",
      "audit_checkpoint",
    ]);
    expect(at(rows, 5)).toMatchObject({
      actorType: "system",
      target: "audit_log",
      prevHash: head.hash,
      details: { ...checkpointJson(first as Checkpoint), trigger: "interval" },
    });
    expect(at(rows, 8).details).toMatchObject({ seq: at(rows, 7).seq, trigger: "shutdown" });
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => l.msg)).toEqual([
      "audit checkpoints on",
      "audit checkpoint",
      "audit checkpoint",
    ]);
    expect(lines[1]).toMatchObject({
      level: "info",
      checkpoint: checkpointJson(first as Checkpoint),
    });
    expect(logs.join("")).not.toContain("PRIVATE");

    const report = await verify();
    expect(report.code).toBe(0);
    expect(report.out).toContain(`2 verified; the newest (event seq ${at(rows, 8).seq})`);
    expect(report.out).toContain("0 events after it");
  });

  it("writes a checkpoint at the interval while the head moves", async () => {
    const checkpoints = checkpointer(keys, 50);
    try {
      await write(3);
      let written = 0;
      const deadline = Date.now() + 30_000;
      while (written === 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        written = (await events()).filter((e) => e.action === "audit_checkpoint").length;
      }
      // The head is a checkpoint now: later ticks add nothing.
      expect(written).toBe(1);
    } finally {
      await checkpoints.close();
    }
  });

  it("keeps each checkpoint right after its head while other writes race it", async () => {
    const checkpoints = checkpointer();
    const writes: Promise<unknown>[] = [];
    for (let round = 0; round < 5; round++) {
      writes.push(write(40, round * 40), checkpoints.checkpoint("interval"));
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(writes);
    await checkpoints.close();
    const report = await verify();
    expect(report.out).not.toContain("INVALID");
    expect(report.out).toMatch(/audit checkpoints: [1-6] verified/);
    expect(report.code).toBe(0);
  });

  it("reports the events that follow the newest checkpoint", async () => {
    const checkpoints = checkpointer();
    await write(4);
    await checkpoints.checkpoint("interval");
    await write(3, 4);
    const report = await verify();
    expect(report.code).toBe(0);
    expect(report.out).toContain("3 events after it, which no checkpoint covers");
    expect((await verify({ trustedKeys: [] })).out).toContain("unknown_key");
  });

  it("finds forged, replayed and unknown-key checkpoints written into the chain", async () => {
    const checkpoints = checkpointer();
    await write(3);
    const real = (await checkpoints.checkpoint("interval")) as Checkpoint;
    // Anyone who can append events can write an audit_checkpoint event; only the key signs.
    const append = (details: Record<string, unknown>) =>
      writer.write({
        actorType: "system",
        action: "audit_checkpoint",
        outcome: "success",
        details,
      });
    const forged = await append({ ...checkpointJson(real), time: "2030-01-01T00:00:00.000Z" });
    await write(1, 3);
    const replayed = await append(checkpointJson(real));
    const stranger = newKeys();
    const head = at(await events(), -1);
    const foreign = await append(
      checkpointJson(signCheckpoint(head, new Date().toISOString(), stranger.signing as never)),
    );
    const malformed = await append({ seq: "1" });

    const report = await verify();
    expect(report.code).toBe(1);
    const invalid = report.out.split("\n").filter((l) => l.includes("INVALID"));
    expect(invalid).toEqual([
      expect.stringContaining(`event seq ${forged.seq} (id ${forged.id}): bad_signature`),
      expect.stringContaining(`event seq ${replayed.seq} (id ${replayed.id}): wrong_head`),
      expect.stringContaining(`event seq ${foreign.seq} (id ${foreign.id}): unknown_key`),
      expect.stringContaining(`event seq ${malformed.seq} (id ${malformed.id}): malformed`),
    ]);
    // The chain itself is intact: every forgery above was appended, not edited in.
    expect(report.out).toMatch(/^audit chain intact/);
  });

  it("finds a chain rewritten with recomputed hashes, at the checkpoint after the change", async () => {
    const checkpoints = checkpointer();
    await write(6);
    await checkpoints.checkpoint("interval");
    await write(2, 6);
    // The forger rewrites event 2 and recomputes every later hash, the checkpoint's included.
    const rows = await events();
    let prev = at(rows, 1).hash;
    for (const [i, row] of rows.entries()) {
      if (i < 2) continue;
      const changed = i === 2 ? { ...row, outcome: "failure" } : row;
      const hash = eventHash(prev, changed);
      await tamper(
        "UPDATE audit_events SET outcome = $1, prev_hash = $2, hash = $3 WHERE id = $4",
        [changed.outcome, prev, hash, row.id],
      );
      prev = hash;
    }
    const report = await verify();
    expect(report.out).toMatch(/^audit chain intact/);
    expect(report.out).toContain(`INVALID at event seq ${at(rows, 6).seq}`);
    expect(report.out).toContain("wrong_head");
    expect(report.code).toBe(1);
  });

  it("verifies the checkpoints of a retired key given as a previous public key", async () => {
    await write(2);
    await checkpointer(keys).checkpoint("interval");
    const next = newKeys([publicPem(keys)]);
    await write(2, 2);
    await checkpointer(next).checkpoint("interval");
    const rotated = await verify({ trustedKeys: next.trusted });
    expect(rotated.out).toContain(`2 verified;`);
    expect(rotated.out).toContain(`with key ${next.signing?.keyId}`);
    expect(rotated.code).toBe(0);
    const forgotten = await verify({
      trustedKeys: newKeys().trusted.concat(next.trusted[0] ?? []),
    });
    expect(forgotten.out).toContain(`unknown_key: signed with key ${keys.signing?.keyId}`);
    expect(forgotten.code).toBe(1);
  });

  it("checks expected heads: present, cut from the end, rewritten, or removed", async () => {
    await write(6);
    const rows = await events();
    const head = (i: number) => ({ seq: at(rows, i).seq, hash: at(rows, i).hash });
    expect((await verify({ expectHeads: [head(2), head(5)] })).code).toBe(0);

    const beyond = { seq: String(BigInt(head(5).seq) + 10n), hash: head(5).hash };
    const cut = await verify({ expectHeads: [beyond] });
    expect(cut.code).toBe(1);
    expect(cut.out).toContain(`TRUNCATED: expected head seq ${beyond.seq}`);
    expect(cut.out).toContain(`ends at seq ${head(5).seq}`);

    const other = { seq: head(3).seq, hash: head(4).hash };
    const rewritten = await verify({ expectHeads: [other] });
    expect(rewritten.out).toContain(`CHANGED: event seq ${other.seq} has hash ${head(3).hash}`);
    expect(rewritten.code).toBe(1);

    // An event that was removed along with the rest of the chain after it, then rebuilt.
    await tamper("DELETE FROM audit_events WHERE seq >= $1", [head(3).seq]);
    await write(3, 10);
    const removed = await verify({ expectHeads: [head(3)] });
    expect(removed.out).toMatch(/CHANGED: expected head seq \d+ .* is missing/);
    expect(removed.code).toBe(1);
  });

  it("takes signed checkpoints from outside only when their signature verifies", async () => {
    await write(3);
    const checkpoints = checkpointer();
    const signed = (await checkpoints.checkpoint("interval")) as Checkpoint;
    expect((await verify({ expectCheckpoints: [signed] })).code).toBe(0);
    const altered = { ...signed, seq: String(BigInt(signed.seq) + 100n) };
    const bad = await verify({ expectCheckpoints: [altered] });
    expect(bad.out).toContain("NOT TRUSTED: bad_signature");
    expect(bad.code).toBe(1);
    const unknown = await verify({ expectCheckpoints: [signed], trustedKeys: [] });
    expect(unknown.out).toContain("NOT TRUSTED: unknown_key");
    expect(unknown.code).toBe(1);
  });
});
