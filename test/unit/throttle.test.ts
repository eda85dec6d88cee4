import { describe, expect, it } from "vitest";
import { createLoginThrottle, defaultThrottlePolicy } from "../../src/identity/throttle.js";

function clock(start = 1_000_000) {
  const c = { t: start, now: () => c.t };
  return c;
}

describe("login throttle", () => {
  it("lets a few failures through, then refuses that address for that account with growing waits", () => {
    const c = clock();
    const throttle = createLoginThrottle(c);
    const { free } = defaultThrottlePolicy.pair;
    for (let i = 0; i < free; i++) {
      expect(throttle.check("alice", "10.0.0.1").kind).toBe("allow");
      throttle.recordFailure("alice", "10.0.0.1");
    }
    const first = throttle.check("alice", "10.0.0.1");
    expect(first).toMatchObject({ kind: "refuse" });
    c.t += first.kind === "refuse" ? first.retryAfterMs : 0;
    expect(throttle.check("alice", "10.0.0.1").kind).toBe("allow");
    throttle.recordFailure("alice", "10.0.0.1");
    const second = throttle.check("alice", "10.0.0.1");
    expect(
      second.kind === "refuse" &&
        first.kind === "refuse" &&
        second.retryAfterMs > first.retryAfterMs,
    ).toBe(true);
  });

  it("after 30 failures from one address, the attacker is refused while the victim elsewhere gets in within the bound", () => {
    const c = clock();
    const throttle = createLoginThrottle(c);
    let refused = 0;
    for (let i = 0; i < 30; i++) {
      const d = throttle.check("victim", "203.0.113.9");
      if (d.kind === "refuse") {
        refused++;
        c.t += d.retryAfterMs; // a patient attacker waits exactly as told
      }
      throttle.recordFailure("victim", "203.0.113.9");
      c.t += 10;
    }
    expect(refused).toBeGreaterThan(0);
    expect(throttle.check("victim", "203.0.113.9").kind).toBe("refuse");
    const victim = throttle.check("victim", "198.51.100.7");
    expect(victim.kind).toBe("allow");
    expect(victim.kind === "allow" && victim.delayMs).toBeLessThanOrEqual(
      defaultThrottlePolicy.account.maxDelayMs,
    );
    expect(victim.kind === "allow" && victim.delayMs).toBeGreaterThan(0);
  });

  it("blocks an address spraying many accounts for the whole window", () => {
    const c = clock();
    const throttle = createLoginThrottle(c);
    for (let i = 0; i < defaultThrottlePolicy.address.block; i++) {
      throttle.recordFailure(`user${i}`, "192.0.2.1");
    }
    const d = throttle.check("someone-new", "192.0.2.1");
    expect(d).toMatchObject({ kind: "refuse", retryAfterMs: defaultThrottlePolicy.windowMs });
  });

  it("forgets failures after the window and clears the pair on success", () => {
    const c = clock();
    const throttle = createLoginThrottle(c);
    for (let i = 0; i < 5; i++) throttle.recordFailure("bob", "10.0.0.2");
    expect(throttle.check("bob", "10.0.0.2").kind).toBe("refuse");
    c.t += defaultThrottlePolicy.windowMs;
    expect(throttle.check("bob", "10.0.0.2")).toEqual({ kind: "allow", delayMs: 0 });
    for (let i = 0; i < 3; i++) throttle.recordFailure("bob", "10.0.0.3");
    throttle.recordSuccess("bob", "10.0.0.3");
    expect(throttle.check("bob", "10.0.0.3").kind).toBe("allow");
  });

  it("treats usernames case-insensitively", () => {
    const throttle = createLoginThrottle(clock());
    for (let i = 0; i < 5; i++) throttle.recordFailure("Carol", "10.0.0.4");
    expect(throttle.check("CAROL", "10.0.0.4").kind).toBe("refuse");
  });
});
