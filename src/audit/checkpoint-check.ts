import {
  type Checkpoint,
  checkpointAction,
  checkSignature,
  parseCheckpoint,
} from "./checkpoint.js";
import type { CheckpointPublicKey } from "./checkpoint-keys.js";
import type { StoredEvent } from "./store.js";

/**
 * What `audit verify` checks beyond the hash chain, in the same pass (docs/audit.md,
 * "Checkpoints"): each `audit_checkpoint` event's signature and that it directly follows the
 * head it signs; how many events follow the newest valid checkpoint; and that the chain still
 * holds each head given from outside (`--expect-head`, `--expect-checkpoint`).
 */

/** A head the chain must contain: seq with this hash. */
export interface ExpectedHead {
  seq: string;
  hash: string;
}

export type CheckpointProblemReason = "malformed" | "unknown_key" | "bad_signature" | "wrong_head";

export interface CheckpointProblem {
  /** The checkpoint event's seq and id. */
  seq: string;
  id: string;
  reason: CheckpointProblemReason;
  message: string;
}

export type ExpectedHeadStatus = "present" | "truncated" | "missing" | "hash_mismatch";

export interface ExpectedHeadResult extends ExpectedHead {
  status: ExpectedHeadStatus;
  /** hash_mismatch: the hash the event has. */
  found?: string;
}

export interface CheckpointReport {
  /** Checkpoint events whose signature and head verified. */
  verified: number;
  /** The newest of them: its event's seq, and what it signs. */
  newest: { eventSeq: string; checkpoint: Checkpoint } | null;
  /** Events after the newest valid checkpoint, checkpoints aside (all of them when none). */
  uncovered: number;
  /** The first 100 invalid checkpoints. */
  problems: CheckpointProblem[];
  problemCount: number;
  /** One per expected head, in seq order. */
  expected: ExpectedHeadResult[];
}

const keptProblems = 100;

export function createCheckpointCheck(options: {
  trusted: readonly CheckpointPublicKey[];
  expected: readonly ExpectedHead[];
}) {
  const pending = [...options.expected].sort((a, b) => compareSeq(a.seq, b.seq));
  const report: CheckpointReport = {
    verified: 0,
    newest: null,
    uncovered: 0,
    problems: [],
    problemCount: 0,
    expected: [],
  };

  const problem = (event: StoredEvent, reason: CheckpointProblemReason, message: string) => {
    report.problemCount++;
    if (report.problems.length < keptProblems) {
      report.problems.push({ seq: event.seq, id: event.id, reason, message });
    }
  };

  function checkpointEvent(event: StoredEvent, previous: ExpectedHead | null): void {
    let checkpoint: Checkpoint;
    try {
      checkpoint = parseCheckpoint(event.details);
    } catch (err) {
      problem(event, "malformed", `its details are not a checkpoint: ${(err as Error).message}`);
      return;
    }
    const signature = checkSignature(checkpoint, options.trusted);
    if (signature === "unknown_key") {
      problem(
        event,
        "unknown_key",
        `signed with key ${checkpoint.keyId}, which is not configured ` +
          "(AUDIT_CHECKPOINT_KEY, AUDIT_CHECKPOINT_KEY_PREVIOUS, AUDIT_CHECKPOINT_PUBLIC_KEYS)",
      );
      return;
    }
    if (signature === "bad_signature") {
      problem(event, "bad_signature", "its signature does not verify: it was forged or changed");
      return;
    }
    if (previous?.seq !== checkpoint.seq || previous.hash !== checkpoint.hash) {
      problem(
        event,
        "wrong_head",
        `it signs head seq ${checkpoint.seq}, hash ${checkpoint.hash}, but the event before ` +
          `it is ${previous ? `seq ${previous.seq}, hash ${previous.hash}` : "none"}: the ` +
          "chain before it was rewritten, or the checkpoint copied from elsewhere",
      );
      return;
    }
    report.verified++;
    report.newest = { eventSeq: event.seq, checkpoint };
    report.uncovered = 0;
  }

  return {
    /** For verifyAuditChain's onEvent: each verified event in chain order. */
    observe(event: StoredEvent, previous: ExpectedHead | null): void {
      if (event.action === checkpointAction) checkpointEvent(event, previous);
      else report.uncovered++;
      while (pending.length > 0) {
        const next = pending[0] as ExpectedHead;
        const order = compareSeq(next.seq, event.seq);
        if (order > 0) break;
        pending.shift();
        if (order < 0) report.expected.push({ ...next, status: "missing" });
        else if (next.hash === event.hash) report.expected.push({ ...next, status: "present" });
        else report.expected.push({ ...next, status: "hash_mismatch", found: event.hash });
      }
    },
    /** The report, once the whole chain was observed. */
    finish(): CheckpointReport {
      for (const head of pending.splice(0)) report.expected.push({ ...head, status: "truncated" });
      return report;
    },
  };
}

function compareSeq(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}
