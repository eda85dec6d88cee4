import type { Queryable } from "../storage/index.js";
import { chainHash, genesisHash, type PreparedEvent } from "./canonical.js";
import type { JsonObject } from "./details.js";
import type { AuditRecord } from "./event.js";

/**
 * pg_advisory_xact_lock key held while a batch is chained and inserted: one fixed value for
 * every traitgate process, so writers sharing a PostgreSQL append to one chain in turn.
 */
export const auditChainLockKey = 7_283_431_217n;

export interface AppendedEvent {
  id: string;
  /** int8 as a decimal string. */
  seq: string;
  hash: string;
}

/**
 * Chains events after the newest stored one and inserts them with one statement. Must run
 * inside a transaction (READ COMMITTED, PostgreSQL's default), on its handle; returns one
 * entry per event, in order.
 */
export async function appendBatch(
  tx: Queryable,
  events: readonly PreparedEvent[],
): Promise<AppendedEvent[]> {
  await tx.query(`SELECT pg_advisory_xact_lock(${auditChainLockKey})`);
  // A statement of its own, after the lock: its snapshot sees the previous holder's commit.
  const last = await tx.query<{ hash: string }>(
    "SELECT hash FROM audit_events ORDER BY seq DESC LIMIT 1",
  );
  let prev = last.rows[0]?.hash ?? genesisHash;
  const prevHashes: string[] = [];
  const hashes: string[] = [];
  for (const event of events) {
    prevHashes.push(prev);
    prev = chainHash(prev, event.canonical);
    hashes.push(prev);
  }
  const records = events.map((event) => event.record);

  // One multi-row INSERT with a fixed text: eleven arrays, whatever the batch size.
  const { rows } = await tx.query<{ id: string; seq: string }>(
    `INSERT INTO audit_events
       (id, occurred_at, actor_type, actor_id, action, target, outcome, request_id, details,
        prev_hash, hash)
     SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[],
       $6::text[], $7::text[], $8::text[], $9::jsonb[], $10::text[], $11::text[])
     RETURNING id::text AS id, seq`,
    [
      records.map((r) => r.id),
      records.map((r) => r.occurredAt),
      records.map((r) => r.actorType),
      records.map((r) => r.actorId),
      records.map((r) => r.action),
      records.map((r) => r.target),
      records.map((r) => r.outcome),
      records.map((r) => r.requestId),
      events.map((event) => event.detailsJson),
      prevHashes,
      hashes,
    ],
  );

  // seq must follow the chain; identity values are drawn in row order, which this checks
  // rather than assumes (a failure rolls the batch back).
  const seqById = new Map(rows.map((row) => [row.id, row.seq]));
  let previousSeq = -1n;
  return records.map((record, i) => {
    const seq = seqById.get(record.id);
    if (seq === undefined || BigInt(seq) <= previousSeq) {
      throw new Error("audit_events: seq values were not assigned in chain order");
    }
    previousSeq = BigInt(seq);
    return { id: record.id, seq, hash: hashes[i] ?? "" };
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
       actor_type, actor_id, action, target, outcome, request_id, details::text AS details,
       prev_hash, hash
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
    details: JSON.parse(row.details) as JsonObject,
    prevHash: row.prev_hash,
    hash: row.hash,
  }));
}
