import { describe, expect, it } from "vitest";
import { createRefusalSampler } from "../../src/audit/refused-calls.js";

describe("sampling anonymous refusals", () => {
  it("records at most perWindow per address and window, then says how many were left out", () => {
    let now = 0;
    const sample = createRefusalSampler({
      perWindow: 2,
      windowMs: 1000,
      clock: { now: () => now },
    });
    expect([sample("a"), sample("a"), sample("a"), sample("a")].map((s) => s.record)).toEqual([
      true,
      true,
      false,
      false,
    ]);
    // Another address has its own budget.
    expect(sample("b").record).toBe(true);
    now = 1000;
    expect(sample("a")).toEqual({ record: true, suppressed: 2 });
    expect(sample("a")).toEqual({ record: true, suppressed: 0 });
  });

  it("keeps a bounded number of addresses", () => {
    const sample = createRefusalSampler({ perWindow: 1, maxAddresses: 2, clock: { now: () => 0 } });
    sample("a");
    sample("b");
    sample("c");
    // "a" was forgotten (oldest): it gets a fresh budget.
    expect(sample("a").record).toBe(true);
    expect(sample("c").record).toBe(false);
  });
});
