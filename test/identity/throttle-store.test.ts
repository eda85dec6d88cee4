import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPostgresThrottleStore } from "../../src/identity/throttle-postgres.js";
import {
  type CounterRule,
  createMemoryThrottleStore,
  type ThrottleCounter,
  type ThrottleStore,
} from "../../src/identity/throttle-store.js";
import { silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import {
  databaseTargets,
  openTestDatabase,
  postgresUrlFor,
  twoHandlesOnOneSchema,
} from "../support/database.js";

/**
 * One set of cases for both throttle stores: the in-process one, and the PostgreSQL one
 * (its functions, from migration 0013, on PGlite and on PostgreSQL). Attempts "at once" are
 * reservations started together: on PostgreSQL each on its own pooled connection.
 */

const windowMs = 15 * 60_000;
const t0 = 1_700_000_000_000;
const refusing = (free: number, blockAt = 0): CounterRule => ({
  free,
  baseMs: 1_000,
  maxMs: 60_000,
  blockAt,
  refuses: true,
  clearedBySuccess: false,
});
const slowing: CounterRule = {
  free: 2,
  baseMs: 500,
  maxMs: 10_000,
  blockAt: 0,
  refuses: false,
  clearedBySuccess: false,
};

/** An attempt's counters as the login throttle makes them: address, pair, account. */
const attempt = (address: string, account: string): ThrottleCounter[] => [
  { key: `password|address|${address}`, rule: refusing(10, 100) },
  {
    key: `password|pair|${address}|${account}`,
    rule: { ...refusing(3), clearedBySuccess: true },
  },
  { key: `password|account|${account}`, rule: slowing },
];

interface Target {
  name: string;
  open(): Promise<{ store: ThrottleStore; db?: Database }>;
}

const targets: Target[] = [
  {
    name: "in process",
    open: async () => ({ store: createMemoryThrottleStore({ windowMs, maxEntries: 1_000 }) }),
  },
  ...databaseTargets().map((target) => ({
    name: `PostgreSQL store on ${target.name}`,
    async open() {
      const db = await openTestDatabase(target);
      return { db, store: createPostgresThrottleStore({ db, windowMs, log: silentLogger }) };
    },
  })),
];

describe.each(targets)("throttle store: $name", (target) => {
  let store: ThrottleStore;
  let db: Database | undefined;
  beforeAll(async () => {
    ({ store, db } = await target.open());
  });
  afterAll(async () => db?.close());

  const reserveAll = (n: number, counters: (i: number) => ThrottleCounter[], now = t0) =>
    Promise.all(Array.from({ length: n }, (_, i) => store.reserve(counters(i), now)));

  it("reserves only the free attempts of 23 sent at once; the others wait from the last", async () => {
    const results = await reserveAll(23, () => attempt("10.0.0.1", "alice"));
    const reserved = results.flatMap((r) => (r.kind === "reserved" ? [r.counts] : []));
    expect(reserved.map((counts) => counts[1]).sort()).toEqual([0, 1, 2]);
    expect(results.filter((r) => r.kind === "refused")).toEqual(
      Array(20).fill({ kind: "refused", retryAfterMs: 1_000 }),
    );
  });

  it("gives each of many attempts at once its own place on the account", async () => {
    const results = await reserveAll(8, (i) => attempt(`10.0.1.${i}`, "bob"));
    const places = results.map((r) => (r.kind === "reserved" ? r.counts[2] : -1));
    expect(places.sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it("keeps a failure counted, takes back a success (clearing the pair) and an abandoned attempt", async () => {
    const counters = attempt("10.0.0.2", "carol");
    for (const settlement of ["failure", "failure", "abandoned", "success"] as const) {
      const r = await store.reserve(counters, t0);
      expect(r.kind).toBe("reserved");
      await store.settle(counters, settlement, t0);
    }
    // Address: 2 failures; pair: cleared by the success; account: 2 failures.
    const next = await store.reserve(counters, t0);
    expect(next).toEqual({ kind: "reserved", counts: [2, 0, 2] });
    await store.settle(counters, "failure", t0 + 5);
  });

  it("refuses after the free failures with growing waits, from the last failure", async () => {
    const counters = attempt("10.0.0.3", "dave");
    for (let i = 0; i < 3; i++) {
      await store.reserve(counters, t0);
      await store.settle(counters, "failure", t0 + 100);
    }
    expect(await store.reserve(counters, t0 + 200)).toEqual({ kind: "refused", retryAfterMs: 900 });
    expect((await store.reserve(counters, t0 + 1_100)).kind).toBe("reserved");
    await store.settle(counters, "failure", t0 + 1_200);
    // A refused attempt counts nothing: the wait is still the fourth failure's, 2 s.
    expect(await store.reserve(counters, t0 + 1_300)).toEqual({
      kind: "refused",
      retryAfterMs: 1_900,
    });
    expect(await store.reserve(counters, t0 + 2_000)).toEqual({
      kind: "refused",
      retryAfterMs: 1_200,
    });
  });

  it("answers with the longest wait of the refusing counters", async () => {
    const fail = async (counters: ThrottleCounter[], now: number) => {
      expect((await store.reserve(counters, now)).kind).toBe("reserved");
      await store.settle(counters, "failure", now);
    };
    // Ten failures from the address (then 1 s), four of them on one pair (then 2 s).
    for (let i = 0; i < 6; i++) await fail(attempt("10.0.0.4", `other-${i}`), t0);
    for (let i = 0; i < 3; i++) await fail(attempt("10.0.0.4", "erin"), t0);
    await fail(attempt("10.0.0.4", "erin"), t0 + 1_000);
    const r = await store.reserve(attempt("10.0.0.4", "erin"), t0 + 1_000);
    expect(r).toEqual({ kind: "refused", retryAfterMs: 2_000 });
  });

  it("forgets a counter a window after its last attempt, and blocks for the window from blockAt", async () => {
    const counters = (i: number) => attempt("10.0.0.5", `spray-${i}`);
    let now = t0;
    for (let i = 0; i < 100; i++) {
      let r = await store.reserve(counters(i), now);
      if (r.kind === "refused") {
        now += r.retryAfterMs;
        r = await store.reserve(counters(i), now);
      }
      expect(r.kind).toBe("reserved");
      await store.settle(counters(i), "failure", now);
    }
    expect(await store.reserve(counters(100), now)).toEqual({
      kind: "refused",
      retryAfterMs: windowMs,
    });
    const later = await store.reserve(counters(100), now + windowMs);
    expect(later).toEqual({ kind: "reserved", counts: [0, 0, 0] });
  });
});

describe.each(targets.filter((t) => t.name.includes("postgres")))("$name", (target) => {
  let store: ThrottleStore;
  let db: Database;
  beforeAll(async () => {
    const opened = await target.open();
    store = opened.store;
    db = opened.db as Database;
  });
  afterAll(async () => db?.close());

  it("stores no username or address in clear", async () => {
    await store.reserve(attempt("10.9.9.9", "zed-the-user"), t0);
    const { rows } = await db.query<{ key: string }>("SELECT key FROM login_throttle");
    expect(rows.length).toBe(3);
    for (const { key } of rows) expect(key).toMatch(/^[0-9a-f]{64}$/);
  });

  it("deletes counters a window old", async () => {
    const sweeping = createPostgresThrottleStore({ db, windowMs, log: silentLogger });
    await sweeping.reserve(attempt("10.9.9.8", "yan"), t0 + windowMs + 1);
    // The deletion runs beside the reservation; the reservations of the case above are gone.
    for (let i = 0; i < 100; i++) {
      const { rows } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM login_throttle",
      );
      if (rows[0]?.n === 3) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM login_throttle");
    expect(rows[0]?.n).toBe(3);
  });
});

const url = postgresUrlFor("throttle store on two connections pools");

describe.skipIf(!url)("the PostgreSQL store shared by two processes' pools", () => {
  let a: Database;
  let b: Database;
  beforeAll(async () => {
    [a, b] = await twoHandlesOnOneSchema(url ?? "");
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it("reserves the free attempts once between them, not once each", async () => {
    const stores = [a, b].map((db) =>
      createPostgresThrottleStore({ db, windowMs, log: silentLogger }),
    );
    const results = await Promise.all(
      Array.from({ length: 23 }, (_, i) =>
        (stores[i % 2] as ThrottleStore).reserve(attempt("10.0.0.1", "alice"), t0),
      ),
    );
    expect(results.filter((r) => r.kind === "reserved")).toHaveLength(3);
  });
});
