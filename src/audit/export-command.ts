import { parseArgs } from "node:util";
import type { Queryable } from "../storage/index.js";
import {
  type AuditEventFilter,
  type AuditEventRow,
  checkAuditFilter,
  readAuditEvents,
} from "./query.js";

/**
 * `traitgate audit export [--since T] [--until T] [--action A] [--actor-id ID]
 * [--actor-type T] [--outcome O]`: the matching events as JSON lines on stdout, oldest first
 * (chain order), read 1,000 at a time. The REST transcoder answers unary JSON only (no
 * google.api.HttpBody, no server streams), so the export is a command, not an API method.
 */

export interface AuditExportOptions {
  filter: AuditEventFilter;
  /** Events per query (default 1000). */
  pageSize?: number;
}

export interface LineSink {
  write(text: string): boolean;
  once(event: "drain", listener: () => void): unknown;
}

/** The command's options from its arguments; throws an Error naming a bad one. */
export function parseAuditExportArgs(args: string[]): AuditExportOptions {
  const { values } = parseArgs({
    args,
    options: {
      since: { type: "string" },
      until: { type: "string" },
      action: { type: "string" },
      "actor-id": { type: "string" },
      "actor-type": { type: "string" },
      outcome: { type: "string" },
    },
    strict: true,
  });
  const time = (name: string, value: string | undefined): Date | undefined => {
    if (value === undefined) return undefined;
    const at = new Date(value);
    if (Number.isNaN(at.getTime())) {
      throw new Error(`--${name} must be a date or time, e.g. 2025-03-01T00:00:00Z`);
    }
    return at;
  };
  const filter: AuditEventFilter = {
    action: values.action,
    actorId: values["actor-id"],
    actorType: values["actor-type"],
    outcome: values.outcome,
    since: time("since", values.since),
    until: time("until", values.until),
  };
  try {
    return { filter: checkAuditFilter(filter) };
  } catch (err) {
    // The domain names fields in snake_case; the command's options are --kebab-case.
    const field = (err as { field?: string }).field ?? "";
    throw new Error(`--${field.replace(/_/g, "-")}: ${(err as Error).message}`);
  }
}

/** The exported form of an event: the stored fields, with its place in the chain. */
export const exportLine = (e: AuditEventRow): string =>
  `${JSON.stringify({
    seq: e.seq,
    id: e.id,
    occurred_at: e.occurredAt.toISOString(),
    actor_type: e.actorType,
    actor_id: e.actorId,
    action: e.action,
    target: e.target,
    outcome: e.outcome,
    request_id: e.requestId,
    client_address: e.clientAddress,
    user_agent: e.userAgent,
    details: e.details,
    // A compact decision record: what the hash covers (details above resolve its refs).
    ...(e.storedDetails ? { stored_details: e.storedDetails } : {}),
    // The values stored_details names, by ref: each ref is sha256 of its value's canonical JSON.
    ...(e.values ? { values: e.values } : {}),
    prev_hash: e.prevHash,
    hash: e.hash,
  })}\n`;

/** Writes every matching event to `out`, waiting when it is full; returns how many. */
export async function runAuditExport(
  db: Queryable,
  out: LineSink,
  options: AuditExportOptions,
): Promise<number> {
  const limit = options.pageSize ?? 1000;
  let cursor: string | undefined;
  let count = 0;
  for (;;) {
    const page = await readAuditEvents(db, {
      filter: options.filter,
      order: "oldest",
      cursor,
      limit,
    });
    for (const event of page) {
      if (!out.write(exportLine(event))) await new Promise<void>((r) => out.once("drain", r));
    }
    count += page.length;
    if (page.length < limit) return count;
    cursor = page.at(-1)?.seq;
  }
}
