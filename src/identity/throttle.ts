import { setTimeout as wait } from "node:timers/promises";
import { DomainError, unavailable } from "../errors.js";
import type { Logger } from "../log.js";
import {
  createMemoryThrottleStore,
  type Settlement,
  type ThrottleCounter,
  type ThrottleStore,
  waitMs,
} from "./throttle-store.js";
import type { Clock } from "./tokens.js";

/**
 * Login throttling that slows attackers without letting anyone lock a victim
 * out for long (docs/identity.md, "Throttling").
 *
 * Three counters of recent failures, each forgotten `windowMs` after its last
 * attempt:
 * - per client address (all accounts): after `address.free` failures, that
 *   address is refused (429) for an exponentially growing time, capped; past
 *   `address.block` failures it is refused for the whole window;
 * - per account and address: after `pair.free` failures, that address is
 *   refused for that account, exponentially, capped;
 * - per account (all addresses): after `account.free` failures, every attempt
 *   on the account is slowed (it waits before its credential is checked),
 *   exponentially, but never more than `account.maxDelayMs`, and never refused.
 *   An address with no failures of its own therefore always gets an answer
 *   within `account.maxDelayMs`: that is the bound on how long an attack can
 *   keep a victim out.
 *
 * Each attempt is reserved before its credential is checked: it counts as a
 * failure while in flight, and is settled after (a failure stays counted, a
 * success is taken back and clears the pair). So attempts sent at once pass
 * only as many as the counters allow, and each waits its own delay by its
 * place on the account. Passwords (and client secrets) and second factors
 * (TOTP and recovery codes) have counters of their own, with the same rules.
 * The counters live in a {@link ThrottleStore}: in the process on PGlite, in
 * the database on PostgreSQL, where every process shares them.
 */
export interface ThrottleLimits {
  address: { free: number; baseMs: number; maxMs: number; block: number };
  pair: { free: number; baseMs: number; maxMs: number };
  account: { free: number; baseMs: number; maxDelayMs: number };
}

export interface ThrottlePolicy extends ThrottleLimits {
  windowMs: number;
  /** Limits of the second-factor counters; default: the password limits above. */
  secondFactor?: ThrottleLimits;
  /** Counters kept in the process's memory (all kinds); the least recently used go first. */
  maxEntries: number;
}

export const defaultThrottlePolicy: ThrottlePolicy = {
  windowMs: 15 * 60_000,
  address: { free: 10, baseMs: 1_000, maxMs: 60_000, block: 100 },
  pair: { free: 3, baseMs: 1_000, maxMs: 15 * 60_000 },
  account: { free: 5, baseMs: 500, maxDelayMs: 10_000 },
  maxEntries: 300_000,
};

/** What is being guessed: a password or client secret, or a second factor. */
export type Factor = "password" | "second_factor";

/** One reserved attempt at a credential. */
export interface Attempt {
  /** How long it waits before its credential is checked: its place on the account. */
  readonly delayMs: number;
  /**
   * Waits `delayMs`, runs `check` and settles the attempt: a success if `succeeded(result)`,
   * else a failure. If `check` throws, the attempt is taken back uncounted.
   */
  run<T>(check: () => Promise<T>, succeeded: (result: T) => boolean): Promise<T>;
}

export type ThrottleDecision =
  | { kind: "allow"; attempt: Attempt }
  | { kind: "refuse"; retryAfterMs: number };

export interface LoginThrottle {
  /**
   * Before checking a credential. Fails closed: when the counters cannot be read or written,
   * throws `unavailable` (DATABASE_UNAVAILABLE or THROTTLE_UNAVAILABLE), never allows.
   */
  reserve(factor: Factor, account: string, address: string): Promise<ThrottleDecision>;
}

/** The three counters of an attempt, in the order every reservation takes them. */
function countersOf(
  limits: ThrottleLimits,
  factor: Factor,
  account: string,
  address: string,
): ThrottleCounter[] {
  // Addresses hold no "|": the pair's key is unambiguous.
  const { address: a, pair: p, account: c } = limits;
  return [
    {
      key: `${factor}|address|${address}`,
      rule: { ...a, blockAt: a.block, refuses: true, clearedBySuccess: false },
    },
    {
      key: `${factor}|pair|${address}|${account}`,
      rule: { ...p, blockAt: 0, refuses: true, clearedBySuccess: true },
    },
    {
      key: `${factor}|account|${account}`,
      rule: {
        free: c.free,
        baseMs: c.baseMs,
        maxMs: c.maxDelayMs,
        blockAt: 0,
        refuses: false,
        clearedBySuccess: false,
      },
    },
  ];
}

/** The answer to a refused attempt: 429 with Retry-After. */
export const tooManyAttempts = (retryAfterMs: number): DomainError =>
  new DomainError(
    "resource_exhausted",
    "TOO_MANY_ATTEMPTS",
    "too many failed attempts; try again later",
    {
      retryAfterSeconds: retryAfterMs / 1000,
    },
  );

/** Any failure of the store refuses the attempt (503), never lets it through unthrottled. */
function failClosed(err: unknown): never {
  if (err instanceof DomainError) throw err;
  throw unavailable(
    "THROTTLE_UNAVAILABLE",
    "sign-in is not available at the moment; try again shortly",
    { cause: err, retryAfterSeconds: 1 },
  );
}

export function createLoginThrottle(
  clock: Clock,
  policy: ThrottlePolicy = defaultThrottlePolicy,
  options: {
    store?: ThrottleStore;
    log?: Logger;
    /** How an attempt waits its delay (tests pass one that does not). */
    sleep?: (ms: number) => Promise<unknown>;
  } = {},
): LoginThrottle {
  const store =
    options.store ??
    createMemoryThrottleStore({ windowMs: policy.windowMs, maxEntries: policy.maxEntries });
  const { log, sleep = wait } = options;

  const settle = (counters: ThrottleCounter[], settlement: Settlement) =>
    store.settle(counters, settlement, clock.now()).catch(failClosed);

  return {
    async reserve(factor, rawAccount, address) {
      const limits = factor === "password" ? policy : (policy.secondFactor ?? policy);
      const counters = countersOf(limits, factor, rawAccount.toLowerCase(), address);
      const reservation = await store.reserve(counters, clock.now()).catch(failClosed);
      if (reservation.kind === "refused") {
        return { kind: "refuse", retryAfterMs: reservation.retryAfterMs };
      }
      const accountCounter = counters[2];
      const place = reservation.counts[2] ?? 0;
      const delayMs = accountCounter ? waitMs(accountCounter.rule, place, policy.windowMs) : 0;
      return {
        kind: "allow",
        attempt: {
          delayMs,
          async run(check, succeeded) {
            let result: Awaited<ReturnType<typeof check>>;
            try {
              if (delayMs > 0) {
                log?.info({ event: "login_slowed", factor, delay_ms: delayMs }, "attempt slowed");
                await sleep(delayMs);
              }
              result = await check();
            } catch (err) {
              await settle(counters, "abandoned").catch(() => undefined);
              throw err;
            }
            await settle(counters, succeeded(result) ? "success" : "failure");
            return result;
          },
        },
      };
    },
  };
}
