import { createHash } from "node:crypto";
import type { JsonObject, JsonValue } from "./details.js";
import type { AuditRecord } from "./event.js";
import type { AuditValue } from "./values.js";

/** prev_hash of the first event of a chain. */
export const genesisHash = "0".repeat(64);

/**
 * Version of the canonical encoding, hashed with every event so it can evolve. Version 2
 * adds the request's origin (client_address, user_agent); an event without one (no request
 * caused it, or it was written before origins were recorded) is encoded as version 1, so
 * that every event ever written keeps its hash, and adding or removing an origin changes it.
 */
export const canonicalVersion = 2;

/**
 * JSON with object keys sorted (by UTF-16 code units, as Array.prototype.sort does), no
 * whitespace, strings and numbers as JSON.stringify writes them. The same value always gives
 * the same text, whatever order its keys were inserted in.
 */
export function canonicalJson(value: JsonValue): string {
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw new TypeError("canonical JSON has no encoding for a non-finite number");
    }
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(value).sort();
  const members = keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key] ?? null)}`);
  return `{${members.join(",")}}`;
}

/**
 * Details whose stored form is known when they are built: a value `prepareDetails` gives back
 * unchanged, with its canonical JSON. The writer takes both as they are instead of walking the
 * value twice (redaction, then encoding): for a decision batch that walk covered a hundred
 * refs and fifty pairs, 5 % of the batch's server CPU. Only for details the audit module
 * writes itself from names, refs and counts (src/audit/decision-record.ts); its tests check
 * each maker against `prepareDetails` and `canonicalJson`. Anything else goes through
 * redaction.
 */
export class CanonicalDetails {
  constructor(
    readonly value: JsonObject,
    readonly json: string,
  ) {}
}

/**
 * The canonical encoding of an event: the canonical JSON of every stored field except seq
 * (the storage order) and the two hashes, with the encoding's version as "v".
 */
export function canonicalEvent(record: AuditRecord): string {
  return prepareEvent(record).canonical;
}

/** An event with its encodings, computed once, before the writer takes the chain's lock. */
export interface PreparedEvent {
  record: AuditRecord;
  /** Canonical JSON of the details: what is stored in the jsonb column. */
  detailsJson: string;
  /** canonicalEvent(record). */
  canonical: string;
  /** Values the details refer to, stored in the same transaction. */
  values: readonly AuditValue[];
}

/** `detailsJson`: canonicalJson(record.details), when the caller has it (CanonicalDetails). */
export function prepareEvent(
  record: AuditRecord,
  values: readonly AuditValue[] = [],
  detailsJson = canonicalJson(record.details),
): PreparedEvent {
  const text = (value: string | null | undefined) => JSON.stringify(value ?? null);
  const clientAddress = record.clientAddress ?? null;
  const userAgent = record.userAgent ?? null;
  const withOrigin = clientAddress !== null || userAgent !== null;
  // canonicalJson of the object {v, id, occurred_at, ...}, written out with its keys in
  // sorted order so that the details are encoded once.
  const canonical =
    `{"action":${text(record.action)},"actor_id":${text(record.actorId)},` +
    `"actor_type":${text(record.actorType)},` +
    (withOrigin ? `"client_address":${text(clientAddress)},` : "") +
    `"details":${detailsJson},` +
    `"id":${text(record.id.toLowerCase())},"occurred_at":${text(record.occurredAt)},` +
    `"outcome":${text(record.outcome)},"request_id":${text(record.requestId)},` +
    `"target":${text(record.target)},` +
    (withOrigin ? `"user_agent":${text(userAgent)},"v":${canonicalVersion}}` : `"v":1}`);
  return { record, detailsJson, canonical, values };
}

/** sha256_hex(prev_hash || "\n" || canonical). */
export function chainHash(prevHash: string, canonical: string): string {
  return createHash("sha256").update(prevHash).update("\n").update(canonical).digest("hex");
}

/** The hash an event must have when it follows prevHash. */
export function eventHash(prevHash: string, record: AuditRecord): string {
  return chainHash(prevHash, canonicalEvent(record));
}
