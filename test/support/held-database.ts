import type { Database } from "../../src/storage/index.js";

/**
 * A database whose next query matching a pattern waits until the test releases
 * it: a call can be held at a known point (while it authenticates, while its
 * handler reads the registry) without sleeping and hoping.
 */

export interface Hold {
  /** Resolves when a matching query has arrived and is being held. */
  reached: Promise<void>;
  /** Lets the held query (and the call waiting on it) go on. */
  release(): void;
}

export interface HoldingDatabase {
  db: Database;
  /** Holds the next query whose SQL matches `pattern` (one query; later ones pass). */
  hold(pattern: RegExp): Hold;
  /** Releases every hold, reached or not (for clean-up). */
  releaseAll(): void;
}

export function holdingDatabase(inner: Database): HoldingDatabase {
  const armed: Array<{ pattern: RegExp; arrive: () => void; released: Promise<void> }> = [];
  const releases = new Set<() => void>();
  const db: Database = {
    ...inner,
    async query(sql, params) {
      const i = armed.findIndex((h) => h.pattern.test(sql));
      if (i >= 0) {
        const [hold] = armed.splice(i, 1);
        hold?.arrive();
        await hold?.released;
      }
      return inner.query(sql, params);
    },
  };
  return {
    db,
    hold(pattern) {
      let arrive = () => {};
      let release = () => {};
      const reached = new Promise<void>((resolve) => {
        arrive = resolve;
      });
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      releases.add(release);
      armed.push({ pattern, arrive, released });
      return {
        reached,
        release: () => {
          releases.delete(release);
          const i = armed.findIndex((h) => h.released === released);
          if (i >= 0) armed.splice(i, 1);
          release();
        },
      };
    },
    releaseAll() {
      armed.length = 0;
      for (const release of releases) release();
      releases.clear();
    },
  };
}
