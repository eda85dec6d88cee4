import { describe, expect, it } from "vitest";
import { DomainError } from "../../src/errors.js";
import {
  createLoginThrottle,
  defaultThrottlePolicy,
  type Factor,
  type LoginThrottle,
  type ThrottleDecision,
} from "../../src/identity/throttle.js";
import type { ThrottleStore } from "../../src/identity/throttle-store.js";

// Delays are read, not waited out.
const noWait = { sleep: async () => undefined };

function clock(start = 1_000_000) {
  const c = { t: start, now: () => c.t };
  return c;
}

/** One attempt that fails its check, if the throttle lets it through; the decision. */
async function fail(
  throttle: LoginThrottle,
  account: string,
  address: string,
  factor: Factor = "password",
): Promise<ThrottleDecision> {
  const decision = await throttle.reserve(factor, account, address);
  if (decision.kind === "allow") {
    await decision.attempt.run(
      async () => false,
      (ok) => ok,
    );
  }
  return decision;
}

const succeed = async (throttle: LoginThrottle, account: string, address: string) => {
  const decision = await throttle.reserve("password", account, address);
  if (decision.kind !== "allow") throw new Error("refused");
  await decision.attempt.run(
    async () => true,
    (ok) => ok,
  );
};

const kind = async (throttle: LoginThrottle, account: string, address: string, factor?: Factor) =>
  (await throttle.reserve(factor ?? "password", account, address)).kind;

// Tests on the account-wide slow-down read the delay; the others keep it at zero.
const noSlowDown = {
  ...defaultThrottlePolicy,
  account: { ...defaultThrottlePolicy.account, free: 1_000 },
};

describe("login throttle", () => {
  it("lets a few failures through, then refuses that address for that account with growing waits", async () => {
    const c = clock();
    const throttle = createLoginThrottle(c, noSlowDown);
    const { free } = defaultThrottlePolicy.pair;
    for (let i = 0; i < free; i++) {
      expect((await fail(throttle, "alice", "10.0.0.1")).kind).toBe("allow");
    }
    const first = await throttle.reserve("password", "alice", "10.0.0.1");
    expect(first).toMatchObject({ kind: "refuse" });
    c.t += first.kind === "refuse" ? first.retryAfterMs : 0;
    expect((await fail(throttle, "alice", "10.0.0.1")).kind).toBe("allow");
    const second = await throttle.reserve("password", "alice", "10.0.0.1");
    expect(
      second.kind === "refuse" &&
        first.kind === "refuse" &&
        second.retryAfterMs > first.retryAfterMs,
    ).toBe(true);
  });

  it("counts attempts in flight: more than the free ones at once are refused before any fails", async () => {
    const throttle = createLoginThrottle(clock(), noSlowDown);
    const { free } = defaultThrottlePolicy.pair;
    const decisions = [];
    for (let i = 0; i < free + 2; i++) {
      decisions.push(await throttle.reserve("password", "dora", "10.0.0.9"));
    }
    expect(decisions.map((d) => d.kind)).toEqual([
      ...Array(free).fill("allow"),
      "refuse",
      "refuse",
    ]);
  });

  it("after 12 failures from one address, the attacker is refused while the victim elsewhere gets in within the bound", async () => {
    const c = clock();
    const throttle = createLoginThrottle(c, defaultThrottlePolicy, noWait);
    let refused = 0;
    // More, and the waits of the pair pass the window: the counters would be forgotten.
    for (let i = 0; i < 12; i++) {
      let d = await fail(throttle, "victim", "203.0.113.9");
      if (d.kind === "refuse") {
        refused++;
        c.t += d.retryAfterMs; // a patient attacker waits exactly as told
        d = await fail(throttle, "victim", "203.0.113.9");
        expect(d.kind).toBe("allow");
      }
      c.t += 10;
    }
    expect(refused).toBeGreaterThan(0);
    expect(await kind(throttle, "victim", "203.0.113.9")).toBe("refuse");
    const victim = await throttle.reserve("password", "victim", "198.51.100.7");
    expect(victim.kind).toBe("allow");
    const delay = victim.kind === "allow" ? victim.attempt.delayMs : -1;
    expect(delay).toBeLessThanOrEqual(defaultThrottlePolicy.account.maxDelayMs);
    expect(delay).toBeGreaterThan(0);
  });

  it("gives attempts on one account growing delays by their place, also while in flight", async () => {
    const throttle = createLoginThrottle(clock(), defaultThrottlePolicy, noWait);
    const { free, baseMs } = defaultThrottlePolicy.account;
    const delays = [];
    // From addresses of their own: only the account-wide counter sees them all.
    for (let i = 0; i < free + 3; i++) {
      const d = await throttle.reserve("password", "erin", `10.1.0.${i}`);
      delays.push(d.kind === "allow" ? d.attempt.delayMs : -1);
    }
    expect(delays).toEqual([...Array(free).fill(0), baseMs, 2 * baseMs, 4 * baseMs]);
  });

  it("blocks an address spraying many accounts for the whole window", async () => {
    const c = clock();
    const throttle = createLoginThrottle(c, noSlowDown);
    for (let i = 0; i < defaultThrottlePolicy.address.block; i++) {
      const d = await fail(throttle, `user${i}`, "192.0.2.1");
      if (d.kind === "refuse") {
        c.t += d.retryAfterMs;
        expect((await fail(throttle, `user${i}`, "192.0.2.1")).kind).toBe("allow");
      }
    }
    const d = await throttle.reserve("password", "someone-new", "192.0.2.1");
    expect(d).toMatchObject({ kind: "refuse", retryAfterMs: defaultThrottlePolicy.windowMs });
  });

  it("forgets failures after the window and clears the pair on success", async () => {
    const c = clock();
    const throttle = createLoginThrottle(c, noSlowDown);
    for (let i = 0; i < 3; i++) await fail(throttle, "bob", "10.0.0.2");
    expect(await kind(throttle, "bob", "10.0.0.2")).toBe("refuse");
    c.t += defaultThrottlePolicy.windowMs;
    expect(await kind(throttle, "bob", "10.0.0.2")).toBe("allow");
    const fresh = createLoginThrottle(c, noSlowDown);
    for (let i = 0; i < 2; i++) await fail(fresh, "bob", "10.0.0.3");
    await succeed(fresh, "bob", "10.0.0.3");
    for (let i = 0; i < 3; i++) expect((await fail(fresh, "bob", "10.0.0.3")).kind).toBe("allow");
  });

  it("treats usernames case-insensitively", async () => {
    const throttle = createLoginThrottle(clock(), noSlowDown);
    for (let i = 0; i < 3; i++) await fail(throttle, "Carol", "10.0.0.4");
    expect(await kind(throttle, "CAROL", "10.0.0.4")).toBe("refuse");
  });

  it("counts second-factor failures apart from password failures", async () => {
    const throttle = createLoginThrottle(clock(), noSlowDown);
    for (let i = 0; i < 3; i++) await fail(throttle, "user-id", "10.0.0.5", "second_factor");
    expect(await kind(throttle, "user-id", "10.0.0.5", "second_factor")).toBe("refuse");
    // A right password settles its own counters; the second factor's stay.
    await succeed(throttle, "user-id", "10.0.0.5");
    expect(await kind(throttle, "user-id", "10.0.0.5", "second_factor")).toBe("refuse");
  });

  it("takes back an attempt whose check ended in an error, uncounted", async () => {
    const throttle = createLoginThrottle(clock(), noSlowDown);
    for (let i = 0; i < 5; i++) {
      const d = await throttle.reserve("password", "fran", "10.0.0.6");
      if (d.kind !== "allow") throw new Error("refused");
      await expect(
        d.attempt.run(
          () => Promise.reject(new Error("database down")),
          () => true,
        ),
      ).rejects.toThrow("database down");
    }
    expect(await kind(throttle, "fran", "10.0.0.6")).toBe("allow");
  });

  it("fails closed: a store that cannot answer refuses the attempt with 503", async () => {
    const broken: ThrottleStore = {
      reserve: () => Promise.reject(new Error("relation login_throttle does not exist")),
      settle: () => Promise.reject(new Error("unreachable")),
    };
    const throttle = createLoginThrottle(clock(), defaultThrottlePolicy, { store: broken });
    const err = await throttle.reserve("password", "gil", "10.0.0.7").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err).toMatchObject({ kind: "unavailable", reason: "THROTTLE_UNAVAILABLE" });

    const settleFails: ThrottleStore = {
      reserve: async () => ({ kind: "reserved", counts: [0, 0, 0] }),
      settle: () => Promise.reject(new Error("connection lost")),
    };
    const other = createLoginThrottle(clock(), defaultThrottlePolicy, { store: settleFails });
    const d = await other.reserve("password", "gil", "10.0.0.7");
    if (d.kind !== "allow") throw new Error("refused");
    await expect(
      d.attempt.run(
        async () => true,
        (ok) => ok,
      ),
    ).rejects.toMatchObject({
      reason: "THROTTLE_UNAVAILABLE",
    });
  });
});
