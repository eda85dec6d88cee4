import { randomUUID } from "node:crypto";
import type { Logger } from "../log.js";
import type { Database } from "../storage/index.js";
import { prepareEvent } from "./canonical.js";
import { type Checkpoint, checkpointAction, checkpointJson, signCheckpoint } from "./checkpoint.js";
import { type CheckpointSigningKey, publicKeyBase64 } from "./checkpoint-keys.js";
import { toRecord } from "./event.js";
import { appendBatch, auditChainLockKey, readHead } from "./store.js";
import type { AuditClock } from "./writer.js";

export type CheckpointTrigger = "interval" | "shutdown";

export interface AuditCheckpoints {
  /**
   * Signs the chain's head and appends the checkpoint as an `audit_checkpoint` event right
   * after it, and logs it; nothing when the log is empty or its newest event is a checkpoint
   * already (the head has not moved). Rejects when the database cannot be written.
   */
  checkpoint(trigger: CheckpointTrigger): Promise<Checkpoint | undefined>;
  /**
   * Stops the interval, then writes the shutdown checkpoint: call it once every event is
   * committed (after the audit writer's close). Never rejects; a failure is logged.
   */
  close(): Promise<void>;
}

export interface AuditCheckpointsOptions {
  db: Pick<Database, "query" | "transaction">;
  log: Logger;
  /** Unset: checkpoints are off (a warning says so at start). */
  key: CheckpointSigningKey | undefined;
  /** Time between checkpoints (one only if the head moved); 0: on shutdown only. */
  intervalMs: number;
  clock?: AuditClock;
}

/**
 * The core's signed checkpoints of the audit chain (docs/audit.md, "Checkpoints"). Each is
 * written in a transaction that holds the chain's lock while it reads the head, so the
 * checkpoint event directly follows the head it signs, whoever else appends to the chain.
 */
export function createAuditCheckpoints(options: AuditCheckpointsOptions): AuditCheckpoints {
  const { db, log, key } = options;
  const clock = options.clock ?? { now: () => Date.now() };
  if (key === undefined) {
    log.warn(
      "audit checkpoints are off (AUDIT_CHECKPOINT_KEY is not set): removing the newest " +
        "audit events cannot be detected against a signed head (docs/audit.md)",
    );
    return { checkpoint: async () => undefined, close: async () => {} };
  }
  log.info(
    { key_id: key.keyId, public_key: publicKeyBase64(key.publicKey) },
    "audit checkpoints on",
  );

  async function append(trigger: CheckpointTrigger): Promise<Checkpoint | undefined> {
    if (key === undefined) return undefined;
    // A cheap look first, without the lock: an idle log takes no lock.
    const newest = await readHead(db);
    if (newest === undefined || newest.action === checkpointAction) return undefined;
    const checkpoint = await db.transaction(async (tx) => {
      // The lock audit_append takes (it is re-entrant): no event can come between the
      // head read here and the checkpoint event.
      await tx.query("SELECT pg_advisory_xact_lock($1::bigint)", [String(auditChainLockKey)]);
      const head = await readHead(tx);
      if (head === undefined || head.action === checkpointAction) return undefined;
      const now = clock.now();
      const signed = signCheckpoint(head, new Date(Math.floor(now)).toISOString(), key);
      const record = toRecord(
        {
          actorType: "system",
          action: checkpointAction,
          target: "audit_log",
          outcome: "success",
          details: { ...checkpointJson(signed), trigger },
        },
        randomUUID(),
        now,
      );
      await appendBatch(tx, [prepareEvent(record)]);
      return signed;
    });
    if (checkpoint !== undefined) {
      // The copy outside the database (a log pipeline): the signed content, no secret.
      log.info({ checkpoint: checkpointJson(checkpoint), trigger }, "audit checkpoint");
    }
    return checkpoint;
  }

  // One checkpoint at a time: the interval's and the shutdown's never overlap.
  let running: Promise<unknown> = Promise.resolve();
  const checkpoint = (trigger: CheckpointTrigger) => {
    const next = running.then(() => append(trigger));
    running = next.catch(() => undefined);
    return next;
  };
  const failed = (trigger: CheckpointTrigger) => (err: unknown) => {
    const error = err instanceof Error ? err.message : String(err);
    log.error({ trigger, error }, "audit checkpoint could not be written");
  };

  let ticking = false;
  const tick = () => {
    if (ticking) return; // the previous one is still being written
    ticking = true;
    checkpoint("interval")
      .catch(failed("interval"))
      .finally(() => {
        ticking = false;
      });
  };
  const timer = options.intervalMs > 0 ? setInterval(tick, options.intervalMs) : undefined;
  timer?.unref();

  return {
    checkpoint,
    async close() {
      if (timer !== undefined) clearInterval(timer);
      await checkpoint("shutdown").catch(failed("shutdown"));
    },
  };
}
