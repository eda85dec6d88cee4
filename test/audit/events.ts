import type { AuditEventInput } from "../../src/audit/index.js";
import type { Queryable } from "../../src/storage/index.js";

/** A plausible event; `n` makes it distinct. */
export function sampleEvent(n: number, overrides: Partial<AuditEventInput> = {}): AuditEventInput {
  return {
    actorType: "user",
    actorId: `user-${n % 7}`,
    action: "settings_update",
    target: "settings",
    outcome: "success",
    requestId: `req-${n}`,
    details: { n, changed: ["log_level"], before: { log_level: "info" } },
    ...overrides,
  };
}

export async function countEvents(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events");
  return rows[0]?.n ?? -1;
}

export interface StoredRow {
  seq: string;
  id: string;
  hash: string;
  prev_hash: string;
}

export async function storedRows(db: Queryable): Promise<StoredRow[]> {
  const { rows } = await db.query<StoredRow>(
    "SELECT seq::text AS seq, id::text AS id, hash, prev_hash FROM audit_events ORDER BY audit_events.seq",
  );
  return rows;
}
