/**
 * What the verifier remembers of keys it looked up: the row found by a prefix (or that there
 * was none), for at most `ttlMs`, so that checking a key does not read the database on every
 * call while a revocation made by another process still applies within `ttlMs`. Concurrent
 * lookups of one prefix share one read. `forget` applies at once, also to a lookup that was
 * already running when it was called: that lookup's result is neither kept nor handed to
 * callers that arrive after `forget`.
 */
export interface KeyCache<T> {
  get(prefix: string): Promise<T>;
  forget(prefix: string): void;
}

export function createKeyCache<T>(
  load: (prefix: string) => Promise<T>,
  options: { ttlMs: number; now: () => number; maxEntries?: number },
): KeyCache<T> {
  const maxEntries = options.maxEntries ?? 10_000;
  const entries = new Map<string, { value: T; at: number }>();
  const inflight = new Map<string, Promise<T>>();

  function remember(prefix: string, value: T, at: number): void {
    entries.delete(prefix);
    if (entries.size >= maxEntries) {
      const oldest = entries.keys().next().value;
      if (oldest !== undefined) entries.delete(oldest);
    }
    entries.set(prefix, { value, at });
  }

  return {
    get(prefix) {
      const cached = entries.get(prefix);
      if (cached !== undefined && options.now() - cached.at < options.ttlMs) {
        return Promise.resolve(cached.value);
      }
      const running = inflight.get(prefix);
      if (running !== undefined) return running;
      // The entry's age counts from before the read, so it never outlives ttlMs of the row.
      const startedAt = options.now();
      const pending = load(prefix).then(
        (value) => {
          if (inflight.get(prefix) === pending) {
            inflight.delete(prefix);
            remember(prefix, value, startedAt);
          }
          return value;
        },
        (err: unknown) => {
          if (inflight.get(prefix) === pending) inflight.delete(prefix);
          throw err;
        },
      );
      inflight.set(prefix, pending);
      return pending;
    },
    forget(prefix) {
      entries.delete(prefix);
      inflight.delete(prefix);
    },
  };
}
