import { randomBytes } from "node:crypto";
import { availableParallelism } from "node:os";
import { hash, verify } from "@node-rs/argon2";
import { createLimiter } from "../limiter.js";

/**
 * argon2id with OWASP's minimum parameters (19 MiB, 2 passes, 1 lane). The
 * library's default algorithm is argon2id; hashing and verifying run on the
 * libuv thread pool, so they never block the event loop; and at most
 * (cores − 1) run at once, so that a burst of logins cannot starve the event
 * loop of CPU and stall token validation.
 */
export const argon2Options = { memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

/** argon2id's cost: memory in KiB and passes. */
export interface PasswordCost {
  memoryCost: number;
  timeCost: number;
}

/**
 * Passwords are compared in Unicode NFKC (NIST SP 800-63B §5.1.1.2): "é" typed as one code point
 * or as "e" and a combining accent, or a full-width "Ａ" and a plain "A", are the same password.
 */
export const normalizePassword = (password: string): string => password.normalize("NFKC");

export interface PasswordHasher {
  /** Hashes the password's NFKC form. */
  hash(password: string): Promise<string>;
  /**
   * Constant-time comparison inside argon2; false on any malformed hash. The NFKC form is
   * checked first; then, when NFKC changes the input, the input as typed, which is what a hash
   * made before passwords were normalised was made of.
   */
  verify(passwordHash: string, password: string): Promise<boolean>;
  /**
   * Spends the same time as a real verification, for logins of unknown users,
   * so that response time does not reveal whether a username exists.
   */
  verifyDummy(password: string): Promise<void>;
}

export async function createPasswordHasher(
  options: {
    concurrency?: number;
    /**
     * New hashes' cost (default argon2Options). Only code passes one (the test servers, to
     * spend less CPU); no setting or variable can lower it. Verification reads the cost of
     * each hash from the hash itself.
     */
    cost?: PasswordCost;
  } = {},
): Promise<PasswordHasher> {
  const limiter = createLimiter(options.concurrency ?? Math.max(1, availableParallelism() - 1));
  const params = { ...argon2Options, ...options.cost };
  const dummyHash = await hash(randomBytes(32), params);
  const check = (passwordHash: string, password: string) =>
    limiter.run(() => verify(passwordHash, password)).catch(() => false);
  // Hashes made since normalisation are of NFKC forms, which NFKC leaves as they are: the
  // fallback to the input as typed can only match a hash of exactly that input.
  const verifyEither = async (passwordHash: string, password: string) => {
    const normalized = normalizePassword(password);
    if (await check(passwordHash, normalized)) return true;
    return normalized !== password && check(passwordHash, password);
  };
  return {
    hash: (password) => limiter.run(() => hash(normalizePassword(password), params)),
    verify: verifyEither,
    async verifyDummy(password) {
      // The same one or two verifications as for a real user, so time tells nothing.
      await verifyEither(dummyHash, password);
    },
  };
}
