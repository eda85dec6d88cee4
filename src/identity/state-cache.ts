import type { Clock } from "./tokens.js";

/**
 * Remembers recently loaded state (a user's active flag and roles, a
 * session's revocation) for a short time, so validating a token does not read
 * the database on every call. Concurrent loads of one key share one read.
 * Changes made by this process call `forget`, so they apply at once here;
 * other processes see them within `ttlMs`.
 */
export interface StateCache<T> {
  get(key: string): Promise<T>;
  forget(key: string): void;
}

export function createStateCache<T>(
  load: (key: string) => Promise<T>,
  options: { ttlMs: number; clock: Clock; maxEntries?: number },
): StateCache<T> {
  const maxEntries = options.maxEntries ?? 10_000;
  const entries = new Map<string, { value: T; at: number }>();
  const inflight = new Map<string, Promise<T>>();
  return {
    async get(key) {
      const cached = entries.get(key);
      if (cached !== undefined && options.clock.now() - cached.at < options.ttlMs) {
        return cached.value;
      }
      const shared = inflight.get(key);
      if (shared !== undefined) return shared;
      const pending: Promise<T> = load(key)
        .then((value) => {
          // A `forget` while this read was under way may have made it stale: then the
          // value answers the callers that asked before, but is not remembered.
          if (inflight.get(key) === pending) {
            if (entries.size >= maxEntries) {
              const oldest = entries.keys().next().value;
              if (oldest !== undefined) entries.delete(oldest);
            }
            entries.delete(key);
            entries.set(key, { value, at: options.clock.now() });
          }
          return value;
        })
        .finally(() => {
          if (inflight.get(key) === pending) inflight.delete(key);
        });
      inflight.set(key, pending);
      return pending;
    },
    forget(key) {
      entries.delete(key);
      // Later reads must not join a read that began before the change.
      inflight.delete(key);
    },
  };
}
