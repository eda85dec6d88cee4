import { sign, verify } from "node:crypto";
import { canonicalJson } from "./canonical.js";
import type { CheckpointPublicKey, CheckpointSigningKey } from "./checkpoint-keys.js";

/**
 * A signed checkpoint: the core's signed statement that the audit chain's newest event, at
 * `time`, was `seq` with `hash` (docs/audit.md, "Checkpoints"). In JSON (the audit event's
 * details, the log line's `checkpoint`, `audit verify --expect-checkpoint`):
 * `{"seq", "hash", "time", "key_id", "signature"}`.
 */
export interface Checkpoint {
  /** int8 as a decimal string. */
  seq: string;
  hash: string;
  /** ISO 8601 UTC with milliseconds. */
  time: string;
  keyId: string;
  /** Ed25519 signature of `checkpointMessage`, base64url without padding. */
  signature: string;
}

/** The audit event that records a checkpoint; it is chained right after the head it signs. */
export const checkpointAction = "audit_checkpoint";

/**
 * What is signed: a fixed label (so that the signature means nothing in another context),
 * a newline, and the canonical JSON of {hash, seq, time}.
 */
export function checkpointMessage(head: Pick<Checkpoint, "seq" | "hash" | "time">): Buffer {
  const body = canonicalJson({ hash: head.hash, seq: head.seq, time: head.time });
  return Buffer.from(`traitgate-audit-checkpoint-v1\n${body}`, "utf8");
}

export function signCheckpoint(
  head: { seq: string; hash: string },
  time: string,
  key: CheckpointSigningKey,
): Checkpoint {
  const { seq, hash } = head;
  const signature = sign(null, checkpointMessage({ seq, hash, time }), key.privateKey);
  return { seq, hash, time, keyId: key.keyId, signature: signature.toString("base64url") };
}

export type SignatureCheck = "valid" | "unknown_key" | "bad_signature";

export function checkSignature(
  checkpoint: Checkpoint,
  trusted: readonly CheckpointPublicKey[],
): SignatureCheck {
  const key = trusted.find((known) => known.keyId === checkpoint.keyId);
  if (key === undefined) return "unknown_key";
  const signature = Buffer.from(checkpoint.signature, "base64url");
  const valid =
    signature.length === 64 &&
    verify(null, checkpointMessage(checkpoint), key.publicKey, signature);
  return valid ? "valid" : "bad_signature";
}

export function checkpointJson(checkpoint: Checkpoint) {
  return {
    seq: checkpoint.seq,
    hash: checkpoint.hash,
    time: checkpoint.time,
    key_id: checkpoint.keyId,
    signature: checkpoint.signature,
  };
}

const formats = {
  seq: /^(0|[1-9][0-9]{0,18})$/,
  hash: /^[0-9a-f]{64}$/,
  time: /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/,
  key_id: /^[0-9a-f]{16}$/,
  signature: /^[A-Za-z0-9_-]{86}$/,
} as const;

/**
 * A checkpoint from its JSON form: the object itself, or a log line holding it in
 * `checkpoint`. Throws a TypeError naming the first field that is missing or malformed.
 */
export function parseCheckpoint(value: unknown): Checkpoint {
  const outer = value as { checkpoint?: unknown } | null;
  const object =
    typeof outer === "object" && outer !== null && typeof outer.checkpoint === "object"
      ? outer.checkpoint
      : value;
  if (typeof object !== "object" || object === null || Array.isArray(object)) {
    throw new TypeError("a checkpoint must be a JSON object");
  }
  const fields = object as Record<string, unknown>;
  for (const [name, format] of Object.entries(formats)) {
    const field = fields[name];
    if (typeof field !== "string" || !format.test(field)) {
      throw new TypeError(`checkpoint field "${name}" is missing or malformed`);
    }
  }
  const text = (name: keyof typeof formats) => fields[name] as string;
  return {
    seq: text("seq"),
    hash: text("hash"),
    time: text("time"),
    keyId: text("key_id"),
    signature: text("signature"),
  };
}
