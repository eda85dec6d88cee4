import type { Queryable } from "../storage/index.js";
import { eventHash } from "./canonical.js";
import { type Checkpoint, checkSignature, parseCheckpoint } from "./checkpoint.js";
import type { CheckpointProblemReason } from "./checkpoint-check.js";
import type { CheckpointPublicKey } from "./checkpoint-keys.js";
import { readEventsAfter, readHead } from "./store.js";
import { type BrokenReason, verifyAuditChain } from "./verify.js";

/**
 * The audit chain's state as the console shows it (docs/audit.md, "Chain state"): the head,
 * the newest signed checkpoint and whether it holds, and a bounded verification from that
 * checkpoint's signed head (from the first event when there is no valid checkpoint). Cheap
 * enough for a page load: at most `maxEvents` events are read and hashed; the answer says
 * how many were left for `traitgate audit verify`.
 */

export interface CheckpointState {
  eventSeq: string;
  /** What it signs; absent when its details are not a checkpoint. */
  checkpoint: Checkpoint | undefined;
  status: "valid" | CheckpointProblemReason;
  message: string;
}

export interface ChainVerification {
  state: "verified" | "partial" | "broken";
  start: "checkpoint" | "genesis";
  /** The seq verification started after ("0" from genesis). */
  startSeq: string;
  checked: number;
  unchecked: number;
  broken?: { seq: string; reason: BrokenReason; message: string };
}

export interface AuditChainState {
  head: { seq: string; hash: string } | undefined;
  checkpoint: CheckpointState | undefined;
  verification: ChainVerification;
}

/** Events checked per call when the caller sets no bound. */
export const chainStateMaxEvents = 10_000;

/**
 * The chain state as the API reads it: calls that arrive while one is being worked out share
 * its answer, so consoles polling at once (or a caller repeating the request) read and hash
 * the events once, not once each. The shared answer is a snapshot taken at most one
 * computation earlier than the call, as any answer is by the time it arrives.
 */
export function createChainStateReader(
  db: Queryable,
  options: { trusted: readonly CheckpointPublicKey[]; maxEvents?: number },
): () => Promise<AuditChainState> {
  let running: Promise<AuditChainState> | undefined;
  return () => {
    running ??= auditChainState(db, options).finally(() => {
      running = undefined;
    });
    return running;
  };
}

export async function auditChainState(
  db: Queryable,
  options: { trusted: readonly CheckpointPublicKey[]; maxEvents?: number },
): Promise<AuditChainState> {
  const maxEvents = options.maxEvents ?? chainStateMaxEvents;
  const head = await readHead(db);
  const checkpoint = await newestCheckpoint(db, options.trusted);
  const anchor =
    checkpoint?.status === "valid" && checkpoint.checkpoint !== undefined
      ? { seq: checkpoint.checkpoint.seq, hash: checkpoint.checkpoint.hash }
      : undefined;
  const report = await verifyAuditChain(db, {
    maxEvents,
    pageSize: Math.min(1000, maxEvents),
    ...(anchor ? { start: anchor } : {}),
  });
  const start = anchor ? ("checkpoint" as const) : ("genesis" as const);
  const startSeq = anchor?.seq ?? "0";
  const verification: ChainVerification = report.ok
    ? {
        state: "verified",
        start,
        startSeq,
        checked: report.count,
        unchecked: report.limited ? seqsAfter(head?.seq, report.head?.seq ?? startSeq) : 0,
      }
    : {
        state: "broken",
        start,
        startSeq,
        checked: report.count,
        unchecked: 0,
        broken: {
          seq: report.firstBroken.seq,
          reason: report.firstBroken.reason,
          message: report.firstBroken.message,
        },
      };
  if (verification.unchecked > 0) verification.state = "partial";
  return {
    head: head ? { seq: head.seq, hash: head.hash } : undefined,
    checkpoint,
    verification,
  };
}

/** The newest audit_checkpoint event, its signature checked and the head it signs read back. */
async function newestCheckpoint(
  db: Queryable,
  trusted: readonly CheckpointPublicKey[],
): Promise<CheckpointState | undefined> {
  // The action as a literal, not a parameter: the partial index of migration 0016 serves it.
  const { rows } = await db.query<{ seq: string }>(
    `SELECT seq::text AS seq FROM audit_events WHERE action = 'audit_checkpoint'
     ORDER BY audit_events.seq DESC LIMIT 1`,
  );
  const seq = rows[0]?.seq;
  if (seq === undefined) return undefined;
  const [event] = await readEventsAfter(db, String(BigInt(seq) - 1n), 1);
  if (event === undefined) return undefined;
  const problem = (
    status: CheckpointProblemReason,
    message: string,
    checkpoint?: Checkpoint,
  ): CheckpointState => ({ eventSeq: seq, checkpoint, status, message });
  let checkpoint: Checkpoint;
  try {
    checkpoint = parseCheckpoint(event.details);
  } catch (err) {
    return problem("malformed", `its details are not a checkpoint: ${(err as Error).message}`);
  }
  const signature = checkSignature(checkpoint, trusted);
  if (signature === "unknown_key") {
    return problem(
      "unknown_key",
      `signed with key ${checkpoint.keyId}, which this core is not configured with`,
      checkpoint,
    );
  }
  if (signature === "bad_signature") {
    return problem(
      "bad_signature",
      "its signature does not verify: it was forged or changed",
      checkpoint,
    );
  }
  // The head it signs must be the event right before it, unchanged.
  const [signed] = await readEventsAfter(db, String(BigInt(checkpoint.seq) - 1n), 1);
  const before = await db.query<{ seq: string }>(
    `SELECT seq::text AS seq FROM audit_events WHERE audit_events.seq < $1
     ORDER BY audit_events.seq DESC LIMIT 1`,
    [seq],
  );
  if (
    signed === undefined ||
    signed.seq !== checkpoint.seq ||
    signed.hash !== checkpoint.hash ||
    eventHash(signed.prevHash, signed) !== signed.hash ||
    before.rows[0]?.seq !== checkpoint.seq ||
    event.prevHash !== checkpoint.hash
  ) {
    return problem(
      "wrong_head",
      `it signs head seq ${checkpoint.seq}, which is not the unchanged event right before it`,
      checkpoint,
    );
  }
  return { eventSeq: seq, checkpoint, status: "valid", message: "" };
}

/**
 * Events after `last` up to the head, from their seq numbers: O(1) where a count(*) would read
 * them all. Seq numbers left unused by a rolled-back write count too, so this is at most a few
 * more than the events there are.
 */
function seqsAfter(head: string | undefined, last: string): number {
  if (head === undefined) return 0;
  const n = BigInt(head) - BigInt(last);
  return n > 0n ? Number(n) : 0;
}
