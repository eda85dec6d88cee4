/**
 * Where login throttling keeps its counters (src/identity/throttle.ts): in the process
 * (below; PGlite, one process) or in PostgreSQL, shared by every process
 * (src/identity/throttle-postgres.ts). Both implement the same rules; the storage suite
 * (test/identity/throttle-store.test.ts) runs one set of cases against both.
 *
 * A counter holds the failures within the window and the attempts in flight (reserved, not
 * yet settled). Its count is the sum: an attempt in flight counts as a failure until it is
 * settled, so attempts sent together cannot all pass a check made before any of them failed.
 */

/** How a counter answers a count `n` (failures + attempts in flight). */
export interface CounterRule {
  /** Attempts that pass freely. */
  free: number;
  /** After them, a wait of baseMs · 2^(n − free) since the counter's last attempt... */
  baseMs: number;
  /** ...capped here. */
  maxMs: number;
  /** From this count on, the wait is the whole window; 0: never. */
  blockAt: number;
  /** Refusing counters turn an attempt away while it must wait; the others only report it. */
  refuses: boolean;
  /** A successful attempt clears the counter's failures (the account-and-address pair). */
  clearedBySuccess: boolean;
}

export interface ThrottleCounter {
  key: string;
  rule: CounterRule;
}

export type Reservation =
  /** Counted in flight on every counter; each counter's count before this attempt. */
  | { kind: "reserved"; counts: number[] }
  /** Nothing counted. */
  | { kind: "refused"; retryAfterMs: number };

/** `abandoned`: the attempt ended without an answer either way (an error): uncounted. */
export type Settlement = "success" | "failure" | "abandoned";

export interface ThrottleStore {
  /**
   * Atomically, against every other reservation in every process sharing the store: refuses
   * while a refusing counter must still wait (with the longest such wait), counting nothing;
   * else counts the attempt in flight on each counter. Callers give counters in one fixed
   * order of kinds.
   */
  reserve(counters: readonly ThrottleCounter[], now: number): Promise<Reservation>;
  /** Ends a reserved attempt: no longer in flight; a failure is counted, a success clears. */
  settle(counters: readonly ThrottleCounter[], settlement: Settlement, now: number): Promise<void>;
}

/**
 * How long after its last attempt a counter at count `n` lets the next one through. The
 * same arithmetic runs in SQL (src/storage/migrations/0013_login_throttle.sql).
 */
export function waitMs(rule: CounterRule, n: number, windowMs: number): number {
  if (n === 0 || n < rule.free) return 0;
  if (rule.blockAt > 0 && n >= rule.blockAt) return windowMs;
  return Math.min(rule.maxMs, rule.baseMs * 2 ** Math.min(30, n - rule.free));
}

interface Entry {
  failures: number;
  inFlight: number;
  last: number;
}

/**
 * Counters in this process's memory, each forgotten `windowMs` after its last attempt; at
 * most `maxEntries` of them, the least recently used forgotten first.
 */
export function createMemoryThrottleStore(options: {
  windowMs: number;
  maxEntries: number;
}): ThrottleStore {
  const { windowMs, maxEntries } = options;
  const entries = new Map<string, Entry>();

  const live = (key: string, now: number): Entry | undefined => {
    const e = entries.get(key);
    if (e !== undefined && now - e.last >= windowMs) {
      entries.delete(key);
      return undefined;
    }
    return e;
  };
  const touch = (key: string, e: Entry) => {
    entries.delete(key);
    if (entries.size >= maxEntries) {
      const oldest = entries.keys().next().value;
      if (oldest !== undefined) entries.delete(oldest);
    }
    entries.set(key, e);
  };

  return {
    // Synchronous inside: nothing else runs between the check and the count.
    async reserve(counters, now) {
      const found = counters.map((c) => live(c.key, now));
      let retryAfterMs = 0;
      for (const [i, { rule }] of counters.entries()) {
        const e = found[i];
        if (!rule.refuses || e === undefined) continue;
        const until = e.last + waitMs(rule, e.failures + e.inFlight, windowMs);
        retryAfterMs = Math.max(retryAfterMs, until - now);
      }
      if (retryAfterMs > 0) return { kind: "refused", retryAfterMs };
      const counts = counters.map(({ key }, i) => {
        const e = found[i] ?? { failures: 0, inFlight: 0, last: now };
        const n = e.failures + e.inFlight;
        touch(key, { failures: e.failures, inFlight: e.inFlight + 1, last: Math.max(e.last, now) });
        return n;
      });
      return { kind: "reserved", counts };
    },

    async settle(counters, settlement, now) {
      for (const { key, rule } of counters) {
        const e = entries.get(key);
        if (e === undefined) continue;
        e.inFlight = Math.max(0, e.inFlight - 1);
        if (settlement === "failure") {
          e.failures += 1;
          e.last = Math.max(e.last, now);
        } else if (settlement === "success" && rule.clearedBySuccess) {
          e.failures = 0;
        }
      }
    },
  };
}
