import { createHash } from "node:crypto";
import { canonicalJson } from "./canonical.js";
import { type JsonValue, prepareValue } from "./details.js";

/**
 * Values audit events refer to instead of repeating them (table audit_values, migration
 * 0017; docs/audit.md, "Compact decision records"). A value is named by its content: `ref` is
 * the first 16 bytes of sha256 of its canonical JSON, base64url (22 characters), so an event's
 * hash, which covers the ref, covers the value too, and `traitgate audit verify` checks that
 * every stored value still hashes to its ref.
 */
export interface AuditValue {
  ref: string;
  /** Canonical JSON: what is stored, and what the ref is the hash of. */
  json: string;
}

/** The ref of a value whose canonical JSON is `json`. */
export const valueRef = (json: string): string =>
  createHash("sha256").update(json).digest().subarray(0, 16).toString("base64url");

/** A value as the audit log keeps it (redacted and storable, as details are) and its ref. */
export function auditValue(value: unknown): AuditValue {
  const json = canonicalJson(prepareValue(value));
  return { ref: valueRef(json), json };
}

/** Checks a value read back from audit_values (its text as PostgreSQL gives it) against ref. */
export const valueMatches = (ref: string, storedText: string): boolean =>
  valueRef(canonicalJson(JSON.parse(storedText) as JsonValue)) === ref;

/**
 * Interned values by a caller's key: the hot path (a decision) computes a value's JSON and
 * hash once per distinct key, not once per event. Bounded, in two generations: when the
 * current one holds `max` values it becomes the previous one and the one before is dropped; a
 * value found in the previous one is carried into the current one. So values asked for again
 * within about `max` others stay, whatever the order they come in. (It was cleared whole at
 * `max`: asked in turn, a working set larger than that missed on every lookup, and each miss
 * costs the value's canonical JSON and its sha256.) At most 2 × `max` values are kept: with the
 * default, about 20 MB for decision inputs of a few hundred bytes.
 */
export interface ValueInterner {
  intern(key: string, build: () => unknown): AuditValue;
}

export function createValueInterner(max = 16_384): ValueInterner {
  let current = new Map<string, AuditValue>();
  let previous = new Map<string, AuditValue>();
  return {
    intern(key, build) {
      let value = current.get(key);
      if (value !== undefined) return value;
      value = previous.get(key) ?? auditValue(build());
      if (current.size >= max) {
        previous = current;
        current = new Map();
      }
      current.set(key, value);
      return value;
    },
  };
}

/** The refs an event's details name: `details.refs`, when it is a list of refs. */
export function referencedValues(details: Readonly<Record<string, unknown>>): string[] {
  const refs = details.refs;
  if (!Array.isArray(refs)) return [];
  return refs.filter((r): r is string => typeof r === "string");
}
