import { describe, expect, it } from "vitest";
import { argon2Options, createPasswordHasher } from "../../src/identity/passwords.js";

describe("password hasher", () => {
  it("hashes with argon2id at OWASP parameters and verifies", async () => {
    const hasher = await createPasswordHasher();
    const hash = await hasher.hash("a long enough password");
    expect(hash).toMatch(
      new RegExp(
        `^\\$argon2id\\$v=19\\$m=${argon2Options.memoryCost},t=${argon2Options.timeCost},p=1\\$`,
      ),
    );
    expect(await hasher.verify(hash, "a long enough password")).toBe(true);
    expect(await hasher.verify(hash, "another password")).toBe(false);
    expect(await hasher.verify("not a hash", "x")).toBe(false);
  });
});
