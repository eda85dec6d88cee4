import type { Queryable } from "../storage/index.js";
import type { PreparedEvent } from "./canonical.js";
import type { JsonObject } from "./details.js";
import type { AuditRecord } from "./event.js";

/**
 * pg_advisory_xact_lock key held while a batch is chained and inserted: one fixed value for
 * every traitgate process, so writers sharing a PostgreSQL append to one chain in turn. The
 * database function audit_append (migrations 0012 and 0015) takes it; change both together.
 */
export const auditChainLockKey = 7_283_431_217n;

/** Column k of the batch's jsonb argument as a PostgreSQL array of `type`, in order. */
const column = (k: number, type: string) =>
  type === "jsonb"
    ? `ARRAY(SELECT e FROM jsonb_array_elements(p.batch->${k}) WITH ORDINALITY AS c(e, n) ORDER BY n)`
    : `ARRAY(SELECT e FROM jsonb_array_elements_text(p.batch->${k}) WITH ORDINALITY AS c(e, n) ORDER BY n)::${type}[]`;

/** audit_append's argument types, in order (migrations 0015 and 0017). */
const appendTypes = [
  "uuid",
  "timestamptz",
  "text",
  "text",
  "text",
  "text",
  "text",
  "text",
  "text",
  "text",
  "jsonb",
  "text",
];
const valueTypes = ["text", "jsonb"];

const appendCall = (types: readonly string[]) =>
  `SELECT event_id, event_seq, event_hash
   FROM (SELECT $1::jsonb AS batch) AS p,
     audit_append(${types.map((type, k) => column(k, type)).join(",\n       ")})`;

const appendSql = appendCall(appendTypes);
const appendWithValuesSql = appendCall([...appendTypes, ...valueTypes]);

export interface AppendedEvent {
  id: string;
  /** int8 as a decimal string. */
  seq: string;
  hash: string;
}

/**
 * Appends events to the chain in one statement: the database function audit_append takes
 * the chain's lock, reads the newest hash, chains the events after it (sha256 over the
 * canonical encodings computed here) and inserts them, after the values they refer to
 * (audit_values; those `stored` says are there already are not sent). One round trip whatever the batch
 * size. Outside a transaction (the writer's batches) the statement is its own transaction
 * and the lock is released at once; inside one (AuditWriter.writeIn) the events commit or
 * roll back with it, and the lock is held until it ends. Returns one entry per event, in
 * order.
 */
export async function appendBatch(
  db: Queryable,
  events: readonly PreparedEvent[],
  stored?: { has(ref: string): boolean },
): Promise<AppendedEvent[]> {
  const records = events.map((event) => event.record);
  // The values the events refer to, once each, but for those known to be stored already.
  const values = new Map<string, string>();
  for (const event of events) {
    for (const value of event.values) {
      if (!stored?.has(value.ref)) values.set(value.ref, value.json);
    }
  }
  const withValues = values.size > 0;
  // The columns travel as one jsonb array of arrays rather than as fourteen array parameters:
  // JSON.stringify writes a list of strings natively, where the driver escapes array literals
  // character by character in JavaScript (a tenth of a decision's CPU). Details and values are
  // canonical JSON already and go in as they are.
  const texts = (list: readonly (string | null)[]) => JSON.stringify(list);
  const columns = [
    texts(records.map((r) => r.id)),
    texts(records.map((r) => r.occurredAt)),
    texts(records.map((r) => r.actorType)),
    texts(records.map((r) => r.actorId)),
    texts(records.map((r) => r.action)),
    texts(records.map((r) => r.target)),
    texts(records.map((r) => r.outcome)),
    texts(records.map((r) => r.requestId)),
    texts(records.map((r) => r.clientAddress ?? null)),
    texts(records.map((r) => r.userAgent ?? null)),
    `[${events.map((event) => event.detailsJson).join(",")}]`,
    texts(events.map((event) => event.canonical)),
    ...(withValues ? [texts([...values.keys()]), `[${[...values.values()].join(",")}]`] : []),
  ];
  // Prepared: parsing and planning this statement cost more than running it for a batch of
  // one (PostgreSQL's CPU per single-event batch 760–840 → 350–485 µs; PGlite 1.9 → 1.0 ms).
  const { rows } = await db.query<{ event_id: string; event_seq: string; event_hash: string }>(
    withValues ? appendWithValuesSql : appendSql,
    [`[${columns.join(",")}]`],
    { prepareAs: withValues ? "traitgate_audit_append_values" : "traitgate_audit_append" },
  );

  // seq must follow the chain; identity values are drawn in row order, which this checks
  // rather than assumes (the batch is committed by then: a failure here is reported to its
  // callers, and `traitgate audit verify` would name the break).
  const byId = new Map(rows.map((row) => [row.event_id, row]));
  let previousSeq = -1n;
  return records.map((record) => {
    const row = byId.get(record.id);
    if (row === undefined || BigInt(row.event_seq) <= previousSeq) {
      throw new Error("audit_events: seq values were not assigned in chain order");
    }
    previousSeq = BigInt(row.event_seq);
    return { id: record.id, seq: String(row.event_seq), hash: row.event_hash };
  });
}

/** A stored event as verification reads it. */
export interface StoredEvent extends AuditRecord {
  seq: string;
  prevHash: string;
  hash: string;
}

interface EventRow {
  seq: string;
  id: string;
  occurred_at: string;
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

/** Lower than any seq: where reading starts. */
export const beforeFirstSeq = "-9223372036854775808";

/**
 * Up to `limit` events after seq `after`, in seq order. Every field is read as text, so the
 * drivers' type parsing plays no part in what is hashed.
 */
export async function readEventsAfter(
  db: Queryable,
  after: string,
  limit: number,
): Promise<StoredEvent[]> {
  const { rows } = await db.query<EventRow>(
    `SELECT seq::text AS seq, id::text AS id,
       to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS occurred_at,
       actor_type, actor_id, action, target, outcome, request_id, client_address, user_agent,
       details::text AS details, prev_hash, hash
     FROM audit_events WHERE audit_events.seq > $1 ORDER BY audit_events.seq LIMIT $2`,
    [after, limit],
  );
  return rows.map((row) => ({
    seq: row.seq,
    id: row.id,
    occurredAt: row.occurred_at,
    actorType: row.actor_type,
    actorId: row.actor_id,
    action: row.action,
    target: row.target,
    outcome: row.outcome,
    requestId: row.request_id,
    clientAddress: row.client_address,
    userAgent: row.user_agent,
    details: JSON.parse(row.details) as JsonObject,
    prevHash: row.prev_hash,
    hash: row.hash,
  }));
}

/** The newest event's seq, hash and action; undefined when the log is empty. */
export async function readHead(
  db: Queryable,
): Promise<{ seq: string; hash: string; action: string } | undefined> {
  const { rows } = await db.query<{ seq: string; hash: string; action: string }>(
    // audit_events.seq: a bare "seq" would order by the text alias.
    "SELECT seq::text AS seq, hash, action FROM audit_events ORDER BY audit_events.seq DESC LIMIT 1",
  );
  return rows[0];
}

/**
 * The stored values of `refs` (audit_values), as PostgreSQL gives their text back; a ref with
 * no stored value is absent from the map.
 */
export async function readValueTexts(
  db: Queryable,
  refs: readonly string[],
): Promise<Map<string, string>> {
  if (refs.length === 0) return new Map();
  const { rows } = await db.query<{ ref: string; value: string }>(
    "SELECT ref, value::text AS value FROM audit_values WHERE ref = ANY($1::text[])",
    [[...new Set(refs)]],
  );
  return new Map(rows.map((row) => [row.ref, row.value]));
}
