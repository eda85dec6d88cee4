import { randomBytes } from "node:crypto";
import { hash, verify } from "@node-rs/argon2";

/**
 * argon2id with OWASP's minimum parameters (19 MiB, 2 passes, 1 lane). The
 * library's default algorithm is argon2id; hashing and verifying run on the
 * libuv thread pool, so they never block the event loop.
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

export async function createPasswordHasher(): Promise<PasswordHasher> {
  const dummyHash = await hash(randomBytes(32), argon2Options);
  return {
    hash: (password) => hash(password, argon2Options),
    async verify(passwordHash, password) {
      try {
        return await verify(passwordHash, password);
      } catch {
        return false;
      }
    },
    async verifyDummy(password) {
      await verify(dummyHash, password).catch(() => false);
    },
  };
}
