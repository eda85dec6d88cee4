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

export interface PasswordHasher {
  hash(password: string): Promise<string>;
  /** Constant-time comparison inside argon2; false on any malformed hash. */
  verify(passwordHash: string, password: string): Promise<boolean>;
  /**
   * Spends the same time as a real verification, for logins of unknown users,
   * so that response time does not reveal whether a username exists.
   */
  verifyDummy(password: string): Promise<void>;
}

export async function createPasswordHasher(
  options: { concurrency?: number } = {},
): Promise<PasswordHasher> {
  const limiter = createLimiter(options.concurrency ?? Math.max(1, availableParallelism() - 1));
  const dummyHash = await hash(randomBytes(32), argon2Options);
  const check = (passwordHash: string, password: string) =>
    limiter.run(() => verify(passwordHash, password)).catch(() => false);
  return {
    hash: (password) => limiter.run(() => hash(password, argon2Options)),
    verify: check,
    async verifyDummy(password) {
      await check(dummyHash, password);
    },
  };
}
