import { describe, expect, it } from "vitest";
import {
  createRefusalSampler,
  type RefusalSamplerOptions,
  type RefusalSummary,
} from "../../src/audit/refusal-sampler.js";

function sampler(options: Partial<RefusalSamplerOptions> = {}) {
  let now = Date.parse("2026-01-01T00:00:00.000Z");
  const summaries: RefusalSummary[] = [];
  const sample = createRefusalSampler({
    perWindow: 2,
    windowMs: 1000,
    clock: { now: () => now },
    timer: false,
    summarize: async (summary) => void summaries.push(summary),
    ...options,
  });
  return {
    sample,
    summaries,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe("sampling anonymous refusals", () => {
  it("records at most perWindow per address and window, and counts the rest in one summary when the window ends", async () => {
    const { sample, summaries, advance } = sampler();
    const taken = [sample.take("a", "rpc:X"), sample.take("a", "rpc:X"), sample.take("a", "rpc:X")];
    advance(10);
    taken.push(sample.take("a", "rpc:Y"), sample.take("a", "rpc:Y"));
    expect(taken).toEqual([true, true, false, false, false]);
    // Another address has its own budget.
    expect(sample.take("b", "rpc:X")).toBe(true);

    await sample.sweep();
    expect(summaries).toEqual([]);
    advance(990);
    await sample.sweep();
    expect(summaries).toEqual([
      {
        address: "a",
        count: 3,
        targets: { "rpc:X": 1, "rpc:Y": 2 },
        firstAt: "2026-01-01T00:00:00.000Z",
        lastAt: "2026-01-01T00:00:00.010Z",
      },
    ]);
    // "b" had nothing left out: no summary. A new window has a new budget.
    expect(sample.take("a", "rpc:X")).toBe(true);
  });

  it("writes the ended window's summary when the address comes back after it", async () => {
    const { sample, summaries, advance } = sampler({ perWindow: 1 });
    sample.take("a", "rpc:X");
    sample.take("a", "rpc:X");
    advance(1000);
    expect(sample.take("a", "rpc:X")).toBe(true);
    await Promise.resolve();
    expect(summaries.map((s) => [s.address, s.count])).toEqual([["a", 1]]);
  });

  it("keeps a bounded number of addresses, writing the summary of the one it forgets", async () => {
    const { sample, summaries } = sampler({ perWindow: 1, maxAddresses: 2 });
    sample.take("a", "rpc:X");
    sample.take("a", "rpc:X");
    sample.take("b", "rpc:X");
    sample.take("c", "rpc:X");
    await Promise.resolve();
    expect(summaries.map((s) => [s.address, s.count])).toEqual([["a", 1]]);
    // "a" was forgotten (oldest): it gets a fresh budget.
    expect(sample.take("a", "rpc:X")).toBe(true);
    expect(sample.take("c", "rpc:X")).toBe(false);
  });

  it("on close, writes every pending count: no refusal goes uncounted", async () => {
    const { sample, summaries } = sampler({ perWindow: 20, windowMs: 60_000 });
    let recorded = 0;
    for (let i = 0; i < 40; i++) if (sample.take("a", "rpc:X")) recorded++;
    for (let i = 0; i < 3; i++) if (sample.take("b", "rpc:X")) recorded++;
    await sample.close();
    expect(recorded).toBe(23);
    expect(summaries.map((s) => [s.address, s.count])).toEqual([["a", 20]]);
  });

  it("puts a summary that could not be written back, for the next sweep", async () => {
    let fail = true;
    const written: RefusalSummary[] = [];
    const errors: number[] = [];
    const { sample, advance } = sampler({
      perWindow: 1,
      summarize: async (summary) => {
        if (fail) throw new Error("audit log down");
        written.push(summary);
      },
      onError: (_err, summary) => errors.push(summary.count),
    });
    sample.take("a", "rpc:X");
    sample.take("a", "rpc:X");
    sample.take("a", "rpc:X");
    advance(1000);
    await sample.sweep();
    expect(errors).toEqual([2]);
    expect(written).toEqual([]);
    fail = false;
    advance(1000);
    await sample.sweep();
    expect(written.map((s) => [s.address, s.count, s.targets])).toEqual([["a", 2, { "rpc:X": 2 }]]);
  });
});
