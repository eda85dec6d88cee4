import { describe, expect, it } from "vitest";
import { createLimiter } from "../../src/limiter.js";

describe("limiter", () => {
  it("runs at most N tasks at once, in arrival order, and survives failures", async () => {
    const limiter = createLimiter(2);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    const task = (i: number) =>
      limiter.run(async () => {
        running++;
        peak = Math.max(peak, running);
        order.push(i);
        await new Promise((r) => setTimeout(r, 5));
        running--;
        if (i === 1) throw new Error("boom");
        return i;
      });
    const results = await Promise.allSettled([0, 1, 2, 3, 4, 5].map(task));
    expect(peak).toBe(2);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
    expect(results.filter((r) => r.status === "rejected")).toHaveLength(1);
    expect(await limiter.run(async () => "after")).toBe("after");
  });

  it("refuses a concurrency below one", () => {
    expect(() => createLimiter(0)).toThrow(RangeError);
  });
});
