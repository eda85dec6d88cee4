import { randomUUID } from "node:crypto";
import { DomainError, unavailable } from "../errors.js";
import type { Logger } from "../log.js";
import {
  asUnavailable,
  type Database,
  databaseUnavailableReason,
  type Queryable,
} from "../storage/index.js";
import { type PreparedEvent, prepareEvent } from "./canonical.js";
import { type AuditEventInput, toRecord } from "./event.js";
import { type AppendedEvent, appendBatch } from "./store.js";

export interface AuditClock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export interface AuditWriterOptions {
  db: Database;
  log: Logger;
  clock?: AuditClock;
  /** Most events committed in one transaction (default 512). */
  maxBatch?: number;
  /** Most events waiting to be committed (default 50,000); more are refused at once. */
  maxQueued?: number;
  /** Told of each batch (metrics); called once per transaction, never per event. */
  observe?: AuditWriterObserver;
}

export interface AuditWriterObserver {
  /** One batch of `events` was committed (ok) or failed, after `seconds`. */
  batch(events: number, seconds: number, ok: boolean): void;
}

export interface AuditWriterStats {
  /** Transactions attempted (one per batch). */
  transactions: number;
  /** Of those, the ones that failed (every caller of the batch was rejected). */
  failedTransactions: number;
  /** Events committed. */
  events: number;
  largestBatch: number;
  /** Writes refused because `maxQueued` events were already waiting. */
  refusedQueueFull: number;
  /** Events waiting to be committed now (the batch being committed not included). */
  queued: number;
}

export interface AuditWriter {
  /**
   * Queues the event and resolves once it is committed, with its id, seq (int8 as a decimal
   * string) and hash. Rejects with a DomainError `unavailable` / `AUDIT_UNAVAILABLE` when its
   * batch could not be committed (then none of that batch was), `DATABASE_UNAVAILABLE` when
   * that was because the database did not answer (then every event waiting behind the batch
   * is refused with it too, rather than wait for another attempt), and with a TypeError, at
   * once, when the event itself is malformed.
   */
  write(event: AuditEventInput): Promise<AppendedEvent>;
  /**
   * Appends the event inside the caller's transaction, so that it is committed with the
   * change it records or not at all: an administrative change whose event cannot be written
   * is rolled back. Holds the chain's lock until that transaction ends, so keep such
   * transactions short. Rejects with `unavailable` / `AUDIT_UNAVAILABLE` when the append
   * fails (the transaction must then roll back; `DATABASE_UNAVAILABLE` when the database did
   * not answer), with a TypeError for a malformed event.
   */
  writeIn(tx: Queryable, event: AuditEventInput): Promise<AppendedEvent>;
  stats(): AuditWriterStats;
  /** Refuses new writes, then waits until every queued event is committed or rejected. */
  close(): Promise<void>;
}

interface Pending {
  event: PreparedEvent;
  resolve(result: AppendedEvent): void;
  reject(err: unknown): void;
}

export const defaultMaxBatch = 512;

/**
 * Events waiting beyond this are refused at once (AUDIT_UNAVAILABLE) rather than held in
 * memory without bound while the database is slow: callers then fail closed.
 */
export const defaultMaxQueued = 50_000;

/**
 * The audit log's writer, shared by every area: group commit. Events written while a batch
 * is being committed wait in a queue; the next batch takes up to maxBatch of them and
 * appends them with one statement (its own transaction), which chains them after the
 * newest stored event under an advisory lock.
 */
export function createAuditWriter(options: AuditWriterOptions): AuditWriter {
  const { db, log, observe } = options;
  const clock = options.clock ?? { now: () => Date.now() };
  const maxBatch = options.maxBatch ?? defaultMaxBatch;
  const maxQueued = options.maxQueued ?? defaultMaxQueued;
  if (!Number.isInteger(maxBatch) || maxBatch < 1) {
    throw new Error("audit writer maxBatch must be a positive integer");
  }
  const stats: AuditWriterStats = {
    transactions: 0,
    failedTransactions: 0,
    events: 0,
    largestBatch: 0,
    refusedQueueFull: 0,
    queued: 0,
  };
  const queue: Pending[] = [];
  // Refs of values this writer's batches committed: not sent again (bounded; a ref sent
  // twice is harmless, the store keeps the first). writeIn does not add to it: its
  // transaction may still roll back.
  const storedValues = createStoredValues();
  let draining: Promise<void> | undefined;
  let closed = false;

  /** The event with its encodings; a TypeError when it is malformed. */
  function prepare(event: AuditEventInput): PreparedEvent {
    const record = toRecord(event, event.id ?? randomUUID(), clock.now());
    // toRecord took canonicalDetails' value only if it is one.
    const canonical = event.canonicalDetails;
    return canonical === undefined
      ? prepareEvent(record, event.values)
      : prepareEvent(record, event.values, canonical.json);
  }

  async function drain(): Promise<void> {
    // Let the writes of the current tick join the first batch.
    await Promise.resolve();
    while (queue.length > 0) {
      await commit(queue.splice(0, maxBatch));
    }
    draining = undefined;
  }

  async function commit(batch: Pending[]): Promise<void> {
    stats.transactions++;
    stats.largestBatch = Math.max(stats.largestBatch, batch.length);
    let appended: AppendedEvent[];
    const started = performance.now();
    try {
      appended = await appendBatch(
        db,
        batch.map((pending) => pending.event),
        storedValues,
      );
    } catch (err) {
      observe?.batch(batch.length, (performance.now() - started) / 1000, false);
      stats.failedTransactions++;
      // Message and code only: driver errors can quote row values, which are event details.
      log.error({ error: summary(err), events: batch.length }, "audit batch could not be written");
      if (isDatabaseUnavailable(err)) {
        // The next batch would wait for the database as long again: every caller waiting
        // now gets the answer at once (503, Retry-After), within the one bound.
        for (const pending of [...batch, ...queue.splice(0)]) pending.reject(err);
        return;
      }
      const failure = unavailable("AUDIT_UNAVAILABLE", "the audit log could not be written", {
        cause: err,
      });
      for (const pending of batch) pending.reject(failure);
      return;
    }
    observe?.batch(batch.length, (performance.now() - started) / 1000, true);
    storedValues.committed(batch.map((pending) => pending.event));
    stats.events += batch.length;
    batch.forEach((pending, i) => {
      const result = appended[i];
      if (result) pending.resolve(result);
      else pending.reject(new Error("audit writer lost an event's result"));
    });
  }

  return {
    write(event) {
      if (closed) {
        return Promise.reject(unavailable("AUDIT_UNAVAILABLE", "the audit writer is closed"));
      }
      let prepared: PreparedEvent;
      try {
        prepared = prepare(event);
      } catch (err) {
        return Promise.reject(err);
      }
      if (queue.length >= maxQueued) {
        stats.refusedQueueFull++;
        return Promise.reject(
          unavailable("AUDIT_UNAVAILABLE", "the audit log is falling behind; try again shortly", {
            retryAfterSeconds: 1,
          }),
        );
      }
      return new Promise<AppendedEvent>((resolve, reject) => {
        queue.push({ event: prepared, resolve, reject });
        draining ??= drain();
      });
    },

    async writeIn(tx, event) {
      const prepared = prepare(event);
      try {
        const [appended] = await appendBatch(tx, [prepared]);
        if (appended === undefined) throw new Error("audit_append gave no row");
        return appended;
      } catch (err) {
        log.error({ error: summary(err) }, "audit event could not be written in its transaction");
        const mapped = asUnavailable(err);
        if (isDatabaseUnavailable(mapped)) throw mapped;
        throw unavailable("AUDIT_UNAVAILABLE", "the audit log could not be written", {
          cause: err,
        });
      }
    },

    stats: () => ({ ...stats, queued: queue.length }),

    async close() {
      closed = true;
      await draining;
    },
  };
}

/** Refs known to be stored. Forgotten all at once when it holds `max`: memory stays bounded. */
function createStoredValues(max = 65_536) {
  const refs = new Set<string>();
  return {
    has: (ref: string) => refs.has(ref),
    committed(events: readonly PreparedEvent[]) {
      for (const event of events) {
        for (const value of event.values) {
          if (refs.size >= max) refs.clear();
          refs.add(value.ref);
        }
      }
    },
  };
}

const isDatabaseUnavailable = (err: unknown): err is DomainError =>
  err instanceof DomainError && err.reason === databaseUnavailableReason;

function summary(err: unknown): { message: string; code?: string } {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? { message, code } : { message };
}
