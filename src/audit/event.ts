import { type JsonObject, prepareDetails, storableText } from "./details.js";

export const actorTypes = ["user", "service", "plugin", "system", "anonymous"] as const;
export type ActorType = (typeof actorTypes)[number];

export const outcomes = ["success", "failure", "denied", "error"] as const;
export type Outcome = (typeof outcomes)[number];

/** What an area hands the audit writer. */
export interface AuditEventInput {
  actorType: ActorType;
  /** The user's, service account's or plugin's id; null for system and anonymous actors. */
  actorId?: string | null;
  /** What happened, snake_case by convention: "login", "settings_update", "operator_call". */
  action: string;
  /** What it happened to, e.g. "user:<id>" or "plugin:rag-db". */
  target?: string | null;
  outcome: Outcome;
  requestId?: string | null;
  /**
   * Anything else worth keeping (before/after, reasons, sizes, latencies). Secrets and
   * personal data are redacted by the writer (docs/audit.md), but do not rely on it: leave
   * them out.
   */
  details?: Readonly<Record<string, unknown>>;
}

/**
 * An event exactly as it is hashed and stored, and as verification reads it back. Fields
 * are in the database's form: `occurredAt` is ISO 8601 UTC with milliseconds.
 */
export interface AuditRecord {
  id: string;
  occurredAt: string;
  actorType: string;
  actorId: string | null;
  action: string;
  target: string | null;
  outcome: string;
  requestId: string | null;
  details: JsonObject;
}

/**
 * The record the writer will store for input, or a TypeError naming what is wrong (a
 * programming error in the caller, reported to that caller alone).
 */
export function toRecord(input: AuditEventInput, id: string, nowMs: number): AuditRecord {
  if (!(actorTypes as readonly string[]).includes(input.actorType)) {
    throw new TypeError(`audit event actorType must be one of ${actorTypes.join(", ")}`);
  }
  if (!(outcomes as readonly string[]).includes(input.outcome)) {
    throw new TypeError(`audit event outcome must be one of ${outcomes.join(", ")}`);
  }
  if (typeof input.action !== "string" || input.action === "") {
    throw new TypeError("audit event action must be a non-empty string");
  }
  const occurredAt = new Date(Math.floor(nowMs));
  if (!(occurredAt.getUTCFullYear() >= 1 && occurredAt.getUTCFullYear() <= 9999)) {
    throw new TypeError("audit clock gave a time outside the years 1 to 9999");
  }
  return {
    id,
    occurredAt: occurredAt.toISOString(),
    actorType: input.actorType,
    actorId: optionalText(input.actorId, "actorId"),
    action: storableText(input.action),
    target: optionalText(input.target, "target"),
    outcome: input.outcome,
    requestId: optionalText(input.requestId, "requestId"),
    details: prepareDetails(input.details),
  };
}

function optionalText(value: string | null | undefined, name: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") throw new TypeError(`audit event ${name} must be a string`);
  return storableText(value);
}
