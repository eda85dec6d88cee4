import { createHash } from "node:crypto";
import { type DomainError, invalidArgument } from "../errors.js";
import type { Queryable } from "../storage/index.js";
import { decisionRefs, expandDecisionDetails } from "./decision-record.js";
import type { JsonObject, JsonValue } from "./details.js";
import { actorTypes, outcomes } from "./event.js";
import { readValueTexts } from "./store.js";
import { valueMatches } from "./values.js";

/**
 * Reading the audit log: filtered, keyset-paginated on `seq`. The API lists newest first;
 * the export (`traitgate audit export`) reads oldest first, in chain order. Read-only.
 */

export interface AuditEventFilter {
  action?: string | undefined;
  actorId?: string | undefined;
  actorType?: string | undefined;
  outcome?: string | undefined;
  /** occurred_at >= since */
  since?: Date | undefined;
  /** occurred_at < until */
  until?: Date | undefined;
}

/** An event as read back, with its place in the chain. */
export interface AuditEventRow {
  /** int8 as a decimal string. */
  seq: string;
  id: string;
  occurredAt: Date;
  actorType: string;
  actorId: string | null;
  action: string;
  target: string | null;
  outcome: string;
  requestId: string | null;
  /** Where the request that caused it came from; null when no request did. */
  clientAddress: string | null;
  userAgent: string | null;
  /** In the full form: a compact decision record's values resolved (decision-record.ts). */
  details: JsonObject;
  /** The details as stored and hashed, when they differ from `details` (a compact record). */
  storedDetails?: JsonObject;
  /**
   * A compact record's values by ref, those that still hash to their ref: with
   * `storedDetails`, what an offline verifier needs (`audit export` writes them).
   */
  values?: Record<string, JsonValue>;
  prevHash: string;
  hash: string;
}

interface EventRow {
  seq: string;
  id: string;
  occurred_at: Date | string;
  actor_type: string;
  actor_id: string | null;
  action: string;
  target: string | null;
  outcome: string;
  request_id: string | null;
  client_address: string | null;
  user_agent: string | null;
  details: string;
  prev_hash: string;
  hash: string;
}

const selectEvents = (order: "ASC" | "DESC") => `
  -- seq is read as text (int8); ORDER BY names the column, not that text.
  SELECT seq::text AS seq, id::text AS id, occurred_at, actor_type, actor_id, action, target,
         outcome, request_id, client_address, user_agent, details::text AS details, prev_hash,
         hash
  FROM audit_events
  WHERE ($1::bigint IS NULL OR audit_events.seq ${order === "DESC" ? "<" : ">"} $1::bigint)
    AND ($2::text IS NULL OR action = $2::text)
    AND ($3::text IS NULL OR actor_id = $3::text)
    AND ($4::text IS NULL OR actor_type = $4::text)
    AND ($5::text IS NULL OR outcome = $5::text)
    AND ($6::timestamptz IS NULL OR occurred_at >= $6::timestamptz)
    AND ($7::timestamptz IS NULL OR occurred_at < $7::timestamptz)
  ORDER BY audit_events.seq ${order}
  LIMIT $8`;
const newestFirst = selectEvents("DESC");
const oldestFirst = selectEvents("ASC");

/**
 * Up to `limit` events matching the filter, strictly after `cursor` in the given order
 * (newest first: seq below it; oldest first: seq above it).
 */
export async function readAuditEvents(
  db: Queryable,
  query: {
    filter: AuditEventFilter;
    order: "newest" | "oldest";
    cursor?: string | undefined;
    limit: number;
  },
): Promise<AuditEventRow[]> {
  const f = query.filter;
  const { rows } = await db.query<EventRow>(query.order === "newest" ? newestFirst : oldestFirst, [
    query.cursor ?? null,
    f.action || null,
    f.actorId || null,
    f.actorType || null,
    f.outcome || null,
    f.since ?? null,
    f.until ?? null,
    query.limit,
  ]);
  // Compact decision records name values by ref: one query for the page's values, and each
  // event's details in the full form (src/audit/decision-record.ts).
  const parsed = rows.map((row) => JSON.parse(row.details) as JsonObject);
  const refs = rows.flatMap((row, i) => decisionRefs(row.action, parsed[i]!));
  const values = new Map<string, JsonValue>();
  // A value is shown only while it still hashes to its ref: an edited audit_values row is
  // named (`altered_refs`), never shown as what was decided, before `audit verify` runs.
  const altered = new Set<string>();
  for (const [ref, text] of await readValueTexts(db, refs)) {
    if (valueMatches(ref, text)) values.set(ref, JSON.parse(text) as JsonValue);
    else altered.add(ref);
  }
  return rows.map((row, i) => {
    const stored = parsed[i]!;
    let details = expandDecisionDetails(row.action, row.id, stored, values);
    const named = [...new Set(decisionRefs(row.action, stored))];
    const changed = named.filter((ref) => altered.has(ref));
    if (changed.length > 0) details = { ...details, altered_refs: changed };
    const known = named.filter((ref) => values.has(ref));
    return {
      seq: row.seq,
      id: row.id,
      occurredAt: new Date(row.occurred_at),
      actorType: row.actor_type,
      actorId: row.actor_id,
      action: row.action,
      target: row.target,
      outcome: row.outcome,
      requestId: row.request_id,
      clientAddress: row.client_address,
      userAgent: row.user_agent,
      details,
      ...(details !== stored ? { storedDetails: stored } : {}),
      ...(known.length > 0
        ? { values: Object.fromEntries(known.map((ref) => [ref, values.get(ref) as JsonValue])) }
        : {}),
      prevHash: row.prev_hash,
      hash: row.hash,
    };
  });
}

/** Checks the filter's values (400 naming the field); empty strings mean "any". */
export function checkAuditFilter(filter: AuditEventFilter): AuditEventFilter {
  const oneOf = (value: string | undefined, allowed: readonly string[], field: string) => {
    if (value && !allowed.includes(value)) {
      throw invalidArgument("INVALID_FIELD", `${field} must be one of ${allowed.join(", ")}`, {
        field,
      });
    }
  };
  oneOf(filter.actorType, actorTypes, "actor_type");
  oneOf(filter.outcome, outcomes, "outcome");
  for (const [field, at] of [
    ["since", filter.since],
    ["until", filter.until],
  ] as const) {
    if (at !== undefined && Number.isNaN(at.getTime())) {
      throw invalidArgument("INVALID_FIELD", `${field} is not a valid time`, { field });
    }
  }
  if (filter.since && filter.until && filter.since.getTime() >= filter.until.getTime()) {
    throw invalidArgument("INVALID_FIELD", "until must be after since", { field: "until" });
  }
  return filter;
}

export interface ListAuditEventsInput extends AuditEventFilter {
  /** 1–1000; 0 or undefined means {@link defaultAuditPageSize}. */
  pageSize?: number | undefined;
  pageToken?: string | undefined;
}

export const defaultAuditPageSize = 100;
export const maxAuditPageSize = 1000;

export interface AuditQuery {
  /** One page of events, newest first. */
  list(input: ListAuditEventsInput): Promise<{ events: AuditEventRow[]; nextPageToken: string }>;
}

export function createAuditQuery(deps: { db: Queryable }): AuditQuery {
  return {
    async list(input) {
      const limit = input.pageSize || defaultAuditPageSize;
      if (!Number.isInteger(limit) || limit < 1 || limit > maxAuditPageSize) {
        throw invalidArgument("INVALID_FIELD", `page_size must be 1–${maxAuditPageSize}`, {
          field: "page_size",
        });
      }
      const filter = checkAuditFilter({
        action: input.action,
        actorId: input.actorId,
        actorType: input.actorType,
        outcome: input.outcome,
        since: input.since,
        until: input.until,
      });
      const fingerprint = filterFingerprint(filter);
      const cursor = input.pageToken ? decodeToken(input.pageToken, fingerprint) : undefined;
      const rows = await readAuditEvents(deps.db, {
        filter,
        order: "newest",
        cursor,
        limit: limit + 1,
      });
      const events = rows.slice(0, limit);
      const last = events.at(-1);
      return {
        events,
        nextPageToken: rows.length > limit && last ? encodeToken(last.seq, fingerprint) : "",
      };
    },
  };
}

/**
 * Page tokens are opaque: base64url of `{"v":1,"before":<seq>,"f":<filter digest>}`. A token
 * used with other filters is refused: the page it points into belongs to another list.
 */
function filterFingerprint(filter: AuditEventFilter): string {
  const canonical = JSON.stringify([
    filter.action || null,
    filter.actorId || null,
    filter.actorType || null,
    filter.outcome || null,
    filter.since?.toISOString() ?? null,
    filter.until?.toISOString() ?? null,
  ]);
  return createHash("sha256").update(canonical).digest("base64url").slice(0, 16);
}

const encodeToken = (before: string, f: string): string =>
  Buffer.from(JSON.stringify({ v: 1, before, f })).toString("base64url");

const invalidToken = (message: string): DomainError =>
  invalidArgument("INVALID_PAGE_TOKEN", message, { field: "page_token" });

function decodeToken(token: string, fingerprint: string): string {
  let parsed: { v?: unknown; before?: unknown; f?: unknown } | null;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as typeof parsed;
  } catch {
    throw invalidToken("page_token is not a token this service issued");
  }
  if (
    parsed?.v !== 1 ||
    typeof parsed.before !== "string" ||
    !/^\d{1,18}$/.test(parsed.before) ||
    typeof parsed.f !== "string"
  ) {
    throw invalidToken("page_token is not a token this service issued");
  }
  if (parsed.f !== fingerprint) {
    throw invalidToken("page_token was issued for other filters; start from the first page");
  }
  return parsed.before;
}
