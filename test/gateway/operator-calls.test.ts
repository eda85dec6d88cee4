import { describe, expect, it } from "vitest";
import { createOperatorCallFeed } from "../../src/gateway/operator-calls.js";
import type { Queryable } from "../../src/storage/index.js";

describe("watching operator calls", () => {
  it("serves a bounded number of watchers at once, and frees a slot when one leaves", async () => {
    const db = { query: async () => ({ rows: [] }) } as unknown as Queryable;
    const feed = createOperatorCallFeed({ db, pollMs: 5, maxWatchers: 1 });
    const first = new AbortController();
    const running = (async () => {
      for await (const _ of feed.watch(0n, first.signal)) {
        // no events in this database
      }
    })();
    await new Promise((r) => setTimeout(r, 20));
    const second = feed.watch(0n, new AbortController().signal)[Symbol.asyncIterator]();
    await expect(second.next()).rejects.toMatchObject({ reason: "TOO_MANY_WATCHERS" });
    first.abort();
    await running;
    const third = new AbortController();
    const again = feed.watch(0n, third.signal)[Symbol.asyncIterator]();
    const pending = again.next();
    third.abort();
    await expect(pending).resolves.toMatchObject({ done: true });
  });
});
