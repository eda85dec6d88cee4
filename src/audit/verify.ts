import type { Queryable } from "../storage/index.js";
import { eventHash, genesisHash } from "./canonical.js";
import { decisionRefs } from "./decision-record.js";
import { beforeFirstSeq, readEventsAfter, readValueTexts, type StoredEvent } from "./store.js";
import { valueMatches } from "./values.js";

export type BrokenReason =
  | "hash_mismatch"
  | "prev_hash_mismatch"
  | "value_mismatch"
  | "value_missing";

export interface BrokenEvent {
  seq: string;
  id: string;
  reason: BrokenReason;
  /** What is wrong, for people. */
  message: string;
}

export type AuditChainReport =
  | {
      ok: true;
      /** Events checked: all of them. */
      count: number;
      /** The newest event, to record elsewhere: a chain cut after it would verify too. */
      head: { seq: string; hash: string } | null;
      /** Set when `maxEvents` stopped it: events after `head` were not checked. */
      limited?: true;
    }
  | {
      ok: false;
      /** Events that verified before the broken one. */
      count: number;
      firstBroken: BrokenEvent;
    };

export interface VerifyOptions {
  /** Called after each page with the number of events checked so far. */
  onProgress?: (checked: number) => void;
  /** Events read per query (default 1000). */
  pageSize?: number;
  /**
   * Called with each event once it verified, in chain order, with the event before it
   * (null for the first): checkpoints and expected heads are checked this way (command.ts).
   */
  onEvent?: (event: StoredEvent, previous: { seq: string; hash: string } | null) => void;
  /**
   * Start after this event, trusting its hash (a signed checkpoint's head), instead of at
   * the genesis value; `head` then starts as this event.
   */
  start?: { seq: string; hash: string };
  /** Check at most this many events (the console's bounded check); then `limited`. */
  maxEvents?: number;
  /** Values remembered as checked, at most (default 100,000); forgotten between pages. */
  valueCacheSize?: number;
}

/**
 * Walks audit_events in seq order, a page at a time, and checks that each event's prev_hash
 * is the previous event's hash (the genesis value for the first) and that its hash is the
 * hash of what is stored, and that every value a compact decision record names by ref is
 * stored and still hashes to its ref (the chain covers the ref, the ref its value). Stops at
 * the first broken event.
 */
export async function verifyAuditChain(
  db: Queryable,
  options: VerifyOptions = {},
): Promise<AuditChainReport> {
  const pageSize = options.pageSize ?? 1000;
  if (!Number.isInteger(pageSize) || pageSize < 1) {
    throw new Error("verify pageSize must be a positive integer");
  }
  let count = 0;
  let after = options.start?.seq ?? beforeFirstSeq;
  let expectedPrev = options.start?.hash ?? genesisHash;
  let head: { seq: string; hash: string } | null = options.start ?? null;
  const max = options.maxEvents ?? Number.POSITIVE_INFINITY;
  // Values already checked on this run: events name the same few again and again.
  const goodValues = new Set<string>();
  const maxGoodValues = options.valueCacheSize ?? 100_000;
  for (;;) {
    if (count >= max) return { ok: true, count, head, limited: true };
    const asked = Math.min(pageSize, max - count);
    const page = await readEventsAfter(db, after, asked);
    // Forgotten between pages only: a ref known good when the page's values were fetched
    // (and so not fetched) must still be known good when an event of the page names it.
    if (goodValues.size >= maxGoodValues) goodValues.clear();
    const refsOf = page.map((event) => decisionRefs(event.action, event.details));
    const values = await readValueTexts(
      db,
      refsOf.flat().filter((ref) => !goodValues.has(ref)),
    );
    for (const [i, event] of page.entries()) {
      const broken = (reason: BrokenReason, message: string): AuditChainReport => ({
        ok: false,
        count,
        firstBroken: { seq: event.seq, id: event.id, reason, message },
      });
      if (event.prevHash !== expectedPrev) {
        return broken(
          "prev_hash_mismatch",
          count === 0 && options.start === undefined
            ? "prev_hash of the first event is not the genesis value: events before it were removed"
            : "prev_hash does not match the previous event's hash: an event before it was " +
                "removed, reordered or rewritten",
        );
      }
      if (eventHash(event.prevHash, event) !== event.hash) {
        return broken(
          "hash_mismatch",
          "hash does not match the event's contents: the event or its hash was changed",
        );
      }
      for (const ref of refsOf[i]!) {
        if (goodValues.has(ref)) continue;
        const text = values.get(ref);
        if (text === undefined) {
          return broken("value_missing", `the value ${ref} the event names is not stored`);
        }
        if (!valueMatches(ref, text)) {
          return broken(
            "value_mismatch",
            `the value ${ref} the event names does not match its ref: the value was changed`,
          );
        }
        goodValues.add(ref);
      }
      options.onEvent?.(event, head);
      expectedPrev = event.hash;
      head = { seq: event.seq, hash: event.hash };
      count++;
    }
    if (page.length > 0) options.onProgress?.(count);
    const last = page.at(-1);
    if (last === undefined || page.length < asked) {
      return { ok: true, count, head };
    }
    after = last.seq;
  }
}
