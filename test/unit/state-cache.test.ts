import { describe, expect, it } from "vitest";
import { createStateCache } from "../../src/identity/state-cache.js";

/** The short-lived state cache behind token validation, API keys and the gateway. */

function source() {
  let value = "v1";
  let reads = 0;
  const gates: (() => void)[] = [];
  return {
    set: (v: string) => {
      value = v;
    },
    reads: () => reads,
    /** Lets the oldest held read finish. */
    release: () => gates.shift()?.(),
    hold: false,
    async load(): Promise<string> {
      reads++;
      const seen = value;
      if (this.hold) await new Promise<void>((resolve) => gates.push(resolve));
      return seen;
    },
  };
}

describe("state cache", () => {
  it("remembers a value for its TTL and shares one read among concurrent callers", async () => {
    let now = 0;
    const src = source();
    const cache = createStateCache(() => src.load(), { ttlMs: 1000, clock: { now: () => now } });
    expect(await Promise.all([cache.get("k"), cache.get("k")])).toEqual(["v1", "v1"]);
    expect(src.reads()).toBe(1);
    src.set("v2");
    now = 999;
    expect(await cache.get("k")).toBe("v1");
    now = 1000;
    expect(await cache.get("k")).toBe("v2");
  });

  it("after forget, does not reuse or remember a read that began before it", async () => {
    const src = source();
    const cache = createStateCache(() => src.load(), { ttlMs: 1000, clock: { now: () => 0 } });
    src.hold = true;
    const before = cache.get("k");
    src.set("v2");
    cache.forget("k");
    const after = cache.get("k");
    src.release();
    src.release();
    expect(await before).toBe("v1");
    expect(await after).toBe("v2");
    src.hold = false;
    expect(await cache.get("k")).toBe("v2");
    expect(src.reads()).toBe(2);
  });
});
