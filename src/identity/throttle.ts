import type { Clock } from "./tokens.js";

/**
 * Login throttling that slows attackers without letting anyone lock a victim
 * out for long (docs/identity.md, "Throttling").
 *
 * Three counters of recent failures, each forgotten `windowMs` after its last
 * failure:
 * - per client address (all accounts): after `address.free` failures, that
 *   address is refused (429) for an exponentially growing time, capped; past
 *   `address.block` failures it is refused for the whole window;
 * - per account and address: after `pair.free` failures, that address is
 *   refused for that account, exponentially, capped;
 * - per account (all addresses): after `account.free` failures, every attempt
 *   on the account is slowed (the answer waits), exponentially, but never more
 *   than `account.maxDelayMs`, and never refused. An address with no failures
 *   of its own therefore always gets an answer within `account.maxDelayMs`:
 *   that is the bound on how long an attack can keep a victim out.
 */
export interface ThrottlePolicy {
  windowMs: number;
  address: { free: number; baseMs: number; maxMs: number; block: number };
  pair: { free: number; baseMs: number; maxMs: number };
  account: { free: number; baseMs: number; maxDelayMs: number };
  /** Entries kept per counter kind; the oldest are forgotten first. */
  maxEntries: number;
}

export const defaultThrottlePolicy: ThrottlePolicy = {
  windowMs: 15 * 60_000,
  address: { free: 10, baseMs: 1_000, maxMs: 60_000, block: 100 },
  pair: { free: 3, baseMs: 1_000, maxMs: 15 * 60_000 },
  account: { free: 5, baseMs: 500, maxDelayMs: 10_000 },
  maxEntries: 100_000,
};

export type ThrottleDecision =
  | { kind: "allow"; delayMs: number }
  | { kind: "refuse"; retryAfterMs: number };

export interface LoginThrottle {
  /** Before checking the password. `delayMs` is how long to wait before answering. */
  check(account: string, address: string): ThrottleDecision;
  recordFailure(account: string, address: string): void;
  /** A successful login clears the account-and-address counter. */
  recordSuccess(account: string, address: string): void;
}

interface Counter {
  failures: number;
  last: number;
}

class Counters {
  private readonly entries = new Map<string, Counter>();
  constructor(
    private readonly windowMs: number,
    private readonly maxEntries: number,
  ) {}

  get(key: string, now: number): Counter | undefined {
    const c = this.entries.get(key);
    if (c !== undefined && now - c.last >= this.windowMs) {
      this.entries.delete(key);
      return undefined;
    }
    return c;
  }

  bump(key: string, now: number): void {
    const c = this.get(key, now);
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(key, { failures: (c?.failures ?? 0) + 1, last: now });
  }

  clear(key: string): void {
    this.entries.delete(key);
  }
}

function backoff(failures: number, free: number, baseMs: number, maxMs: number): number {
  if (failures < free) return 0;
  return Math.min(maxMs, baseMs * 2 ** Math.min(30, failures - free));
}

export function createLoginThrottle(
  clock: Clock,
  policy: ThrottlePolicy = defaultThrottlePolicy,
): LoginThrottle {
  const addresses = new Counters(policy.windowMs, policy.maxEntries);
  const pairs = new Counters(policy.windowMs, policy.maxEntries);
  const accounts = new Counters(policy.windowMs, policy.maxEntries);
  const pairKey = (account: string, address: string) => `${account}\u0000${address}`;
  const normal = (account: string) => account.toLowerCase();

  return {
    check(rawAccount, address) {
      const now = clock.now();
      const account = normal(rawAccount);
      const byAddress = addresses.get(address, now);
      if (byAddress !== undefined) {
        const { free, baseMs, maxMs, block } = policy.address;
        const wait =
          byAddress.failures >= block
            ? policy.windowMs
            : backoff(byAddress.failures, free, baseMs, maxMs);
        const until = byAddress.last + wait;
        if (now < until) return { kind: "refuse", retryAfterMs: until - now };
      }
      const byPair = pairs.get(pairKey(account, address), now);
      if (byPair !== undefined) {
        const { free, baseMs, maxMs } = policy.pair;
        const until = byPair.last + backoff(byPair.failures, free, baseMs, maxMs);
        if (now < until) return { kind: "refuse", retryAfterMs: until - now };
      }
      const byAccount = accounts.get(account, now);
      const { free, baseMs, maxDelayMs } = policy.account;
      const delayMs = byAccount ? backoff(byAccount.failures, free, baseMs, maxDelayMs) : 0;
      return { kind: "allow", delayMs };
    },
    recordFailure(rawAccount, address) {
      const now = clock.now();
      const account = normal(rawAccount);
      addresses.bump(address, now);
      pairs.bump(pairKey(account, address), now);
      accounts.bump(account, now);
    },
    recordSuccess(rawAccount, address) {
      pairs.clear(pairKey(normal(rawAccount), address));
    },
  };
}
