import { createHash } from "node:crypto";
import type { Logger } from "../log.js";
import type { Queryable } from "../storage/index.js";
import type { Reservation, ThrottleCounter, ThrottleStore } from "./throttle-store.js";

/**
 * Throttling counters in PostgreSQL, shared by every process on the database: one round trip
 * to reserve an attempt and one to settle it, each a function call that takes the counters'
 * rows in one fixed order (src/storage/migrations/0013_login_throttle.sql). Rows older than
 * the window are deleted at most once a minute per process, skipping rows in use.
 */
export function createPostgresThrottleStore(options: {
  db: Queryable;
  windowMs: number;
  log: Logger;
  /** Between two deletions of forgotten counters (default one minute). */
  sweepEveryMs?: number;
}): ThrottleStore {
  const { db, windowMs, log } = options;
  const sweepEveryMs = options.sweepEveryMs ?? 60_000;
  let lastSweep = Number.NEGATIVE_INFINITY;

  // No username or address in clear in the table.
  const keysOf = (counters: readonly ThrottleCounter[]) =>
    counters.map(({ key }) => createHash("sha256").update(key).digest("hex"));

  function sweep(now: number): void {
    if (now - lastSweep < sweepEveryMs) return;
    lastSweep = now;
    db.query(
      `DELETE FROM login_throttle WHERE key IN (
         SELECT key FROM login_throttle WHERE last_ms <= $1 FOR UPDATE SKIP LOCKED)`,
      [now - windowMs],
    ).catch((err: unknown) => {
      log.warn({ err }, "could not delete forgotten login throttle counters");
    });
  }

  return {
    async reserve(counters, now): Promise<Reservation> {
      const rules = counters.map((c) => c.rule);
      const { rows } = await db.query<{ retry_after_ms: string; counts: number[] | null }>(
        "SELECT retry_after_ms, counts FROM login_throttle_reserve($1, $2, $3, $4, $5, $6, $7, $8)",
        [
          keysOf(counters),
          rules.map((r) => r.free),
          rules.map((r) => r.baseMs),
          rules.map((r) => r.maxMs),
          rules.map((r) => r.blockAt),
          rules.map((r) => r.refuses),
          windowMs,
          now,
        ],
      );
      sweep(now);
      const row = rows[0];
      if (row === undefined) throw new Error("login_throttle_reserve returned no row");
      const retryAfterMs = Number(row.retry_after_ms);
      if (retryAfterMs > 0 || row.counts === null) return { kind: "refused", retryAfterMs };
      return { kind: "reserved", counts: row.counts };
    },

    async settle(counters, settlement, now) {
      await db.query("SELECT login_throttle_settle($1, $2, $3, $4)", [
        keysOf(counters),
        counters.map((c) => settlement === "success" && c.rule.clearedBySuccess),
        settlement === "failure",
        now,
      ]);
    },
  };
}
