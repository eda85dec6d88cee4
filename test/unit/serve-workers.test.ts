import { describe, expect, it } from "vitest";
import { maxWorkers, nextBackoff, parseWorkerCount } from "../../src/serve-workers.js";

describe("--workers", () => {
  it.each([
    ["1", 1],
    ["2", 2],
    [" 8 ", 8],
    [String(maxWorkers), maxWorkers],
  ])("takes %j", (raw, n) => {
    expect(parseWorkerCount(raw)).toBe(n);
  });

  it.each([["0"], ["65"], ["-1"], ["1.5"], ["two"], [""], ["1e1"], ["0x2"]])(
    "refuses %j, naming the flag",
    (raw) => {
      expect(() => parseWorkerCount(raw)).toThrow(/^--workers must be an integer from 1 to 64/);
    },
  );
});

describe("restart backoff", () => {
  const limits = { minBackoffMs: 1_000, maxBackoffMs: 30_000, stableAfterMs: 30_000 };

  it("waits the minimum after a first death", () => {
    expect(nextBackoff(undefined, 10, limits)).toBe(1_000);
  });

  it("doubles with each death in a row, up to the maximum", () => {
    const waits: number[] = [];
    let previous: number | undefined;
    for (let i = 0; i < 7; i++) {
      previous = nextBackoff(previous, 100, limits);
      waits.push(previous);
    }
    expect(waits).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
  });

  it("starts over once a worker has run long enough", () => {
    expect(nextBackoff(16_000, 30_000, limits)).toBe(1_000);
    expect(nextBackoff(16_000, 29_999, limits)).toBe(30_000);
  });
});
