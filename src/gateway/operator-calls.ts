import { setTimeout as sleep } from "node:timers/promises";
import { readAuditEvents } from "../audit/index.js";
import { DomainError } from "../errors.js";
import type { Queryable } from "../storage/index.js";

/**
 * Live tail of `operator_call` audit events, for WatchOperatorCalls: reads the
 * audit log (so it sees the calls of every process sharing the database) a
 * page at a time, then polls for newer events until the watcher goes away.
 */

export interface OperatorCallEvent {
  seq: bigint;
  occurredAt: Date;
  caller: string;
  target: string;
  operation: string;
  outcome: string;
  status: number;
  reason: string;
  latencyMs: number;
  payloadBytes: number;
  requestId: string;
}

export interface OperatorCallFeed {
  /** Events after `afterSeq` (0n: after the newest event now), until `signal` aborts. */
  watch(afterSeq: bigint, signal: AbortSignal): AsyncIterable<OperatorCallEvent>;
}

const pageSize = 500;

/** Watchers served at once per process; each polls the database. */
export const maxWatchers = 16;

export function createOperatorCallFeed(deps: {
  db: Queryable;
  pollMs?: number;
  maxWatchers?: number;
}): OperatorCallFeed {
  const pollMs = deps.pollMs ?? 250;
  const limit = deps.maxWatchers ?? maxWatchers;
  const filter = { action: "operator_call" };
  let watching = 0;
  return {
    async *watch(afterSeq, signal) {
      if (watching >= limit) {
        throw new DomainError(
          "resource_exhausted",
          "TOO_MANY_WATCHERS",
          `at most ${limit} watchers per server; try again later`,
          { retryAfterSeconds: 5 },
        );
      }
      watching++;
      try {
        yield* follow(afterSeq, signal);
      } finally {
        watching--;
      }
    },
  };

  async function* follow(afterSeq: bigint, signal: AbortSignal): AsyncGenerator<OperatorCallEvent> {
    let cursor =
      afterSeq > 0n
        ? afterSeq.toString()
        : ((await readAuditEvents(deps.db, { filter: {}, order: "newest", limit: 1 }))[0]?.seq ??
          "0");
    while (!signal.aborted) {
      const rows = await readAuditEvents(deps.db, {
        filter,
        order: "oldest",
        cursor,
        limit: pageSize,
      });
      for (const row of rows) {
        const d = row.details;
        yield {
          seq: BigInt(row.seq),
          occurredAt: row.occurredAt,
          caller: String(d.caller ?? ""),
          target: (row.target ?? "").replace(/^plugin:/, ""),
          operation: String(d.operation ?? ""),
          outcome: row.outcome,
          status: Number(d.status ?? 0),
          reason: String(d.reason ?? ""),
          latencyMs: Number(d.latency_ms ?? 0),
          payloadBytes: Number(d.payload_bytes ?? 0),
          requestId: row.requestId ?? "",
        };
        cursor = row.seq;
      }
      if (rows.length < pageSize) {
        await sleep(pollMs, undefined, { signal }).catch(() => undefined);
      }
    }
  }
}
