import { CanonicalDetails } from "./canonical.js";
import { type JsonObject, prepareDetails, storableText } from "./details.js";
import type { AuditValue } from "./values.js";

export const actorTypes = ["user", "service", "plugin", "system", "anonymous"] as const;
export type ActorType = (typeof actorTypes)[number];

export const outcomes = ["success", "failure", "denied", "error"] as const;
export type Outcome = (typeof outcomes)[number];

/**
 * Where a request came from, resolved once per request by the server (src/server/origin.ts):
 * the client's address (the TCP peer, or what trusted proxies say) and its User-Agent
 * (control characters removed, at most 256 characters; "" when it sent none).
 */
export interface RequestOrigin {
  clientAddress: string;
  userAgent: string;
}

/**
 * What an area's domain functions get from a request, to put on the events it causes: its
 * id and its origin. Absent origin: not caused by a request (the command line, demo mode).
 */
export interface AuditedRequest {
  requestId: string | null;
  origin?: RequestOrigin | undefined;
}

/** The event fields an audited request gives every event it causes. */
export const requestFields = (request: {
  requestId?: string | null | undefined;
  origin?: RequestOrigin | undefined;
}): Pick<AuditEventInput, "requestId" | "origin"> => ({
  requestId: request.requestId ?? null,
  origin: request.origin ?? null,
});

/** What an area hands the audit writer. */
export interface AuditEventInput {
  /**
   * The event's id (a UUID), when the caller must know it before the event is written (a
   * decision's id is its event's); the writer draws one otherwise.
   */
  id?: string;
  actorType: ActorType;
  /** The user's, service account's or plugin's id; null for system and anonymous actors. */
  actorId?: string | null;
  /** What happened, snake_case by convention: "login", "settings_update", "operator_call". */
  action: string;
  /** What it happened to, e.g. "user:<id>" or "plugin:rag-db". */
  target?: string | null;
  outcome: Outcome;
  requestId?: string | null;
  /** Where the request that caused the event came from; null when no request did. */
  origin?: RequestOrigin | null;
  /**
   * Anything else worth keeping (before/after, reasons, sizes, latencies). Secrets and
   * personal data are redacted by the writer (docs/audit.md), but do not rely on it: leave
   * them out.
   */
  details?: Readonly<Record<string, unknown>>;
  /**
   * Instead of `details`: details already in their stored form, taken as they are (the audit
   * module's own decision records, src/audit/canonical.ts). Not both.
   */
  canonicalDetails?: CanonicalDetails;
  /**
   * Values the details refer to by ref (`details.refs`), stored with the event in the same
   * transaction (src/audit/values.ts).
   */
  values?: readonly AuditValue[];
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

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
  /** The request's origin; both null for events no request caused (and for older events). */
  clientAddress?: string | null;
  userAgent?: string | null;
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
  if (input.id !== undefined && !uuidPattern.test(input.id)) {
    throw new TypeError("audit event id must be a lower-case UUID");
  }
  return {
    id: input.id ?? id,
    occurredAt: occurredAt.toISOString(),
    actorType: input.actorType,
    actorId: optionalText(input.actorId, "actorId"),
    action: storableText(input.action),
    target: optionalText(input.target, "target"),
    outcome: input.outcome,
    requestId: optionalText(input.requestId, "requestId"),
    ...originFields(input.origin),
    details: detailsOf(input),
  };
}

function detailsOf(input: AuditEventInput): JsonObject {
  const canonical = input.canonicalDetails;
  if (canonical === undefined) return prepareDetails(input.details);
  if (!(canonical instanceof CanonicalDetails) || input.details !== undefined) {
    throw new TypeError("audit event canonicalDetails must be CanonicalDetails, without details");
  }
  return canonical.value;
}

function originFields(origin: RequestOrigin | null | undefined) {
  if (origin === undefined || origin === null) return { clientAddress: null, userAgent: null };
  if (typeof origin !== "object") throw new TypeError("audit event origin must be an object");
  return {
    clientAddress: optionalText(origin.clientAddress, "origin.clientAddress") ?? "",
    userAgent: optionalText(origin.userAgent, "origin.userAgent") ?? "",
  };
}

function optionalText(value: string | null | undefined, name: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") throw new TypeError(`audit event ${name} must be a string`);
  return storableText(value);
}
