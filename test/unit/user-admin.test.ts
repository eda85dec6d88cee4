import { describe, expect, it } from "vitest";
import { DomainError } from "../../src/errors.js";
import {
  checkPasswordPolicy,
  commonPasswords,
  maxPasswordLength,
  minPasswordLength,
  passwordProblem,
} from "../../src/identity/password-policy.js";

describe("password policy (NIST 800-63B)", () => {
  it("refuses fewer than 12 characters, counting code points", () => {
    expect(passwordProblem("")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("k7#vQ2!mZp9")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("k7#vQ2!mZp9x")).toBeUndefined();
    // Eleven emoji are 22 UTF-16 units but 11 characters.
    expect(passwordProblem("🦊🐙🦉🐢🦀🐝🦋🐌🦎🐬🦔")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("🦊🐙🦉🐢🦀🐝🦋🐌🦎🐬🦔🐧")).toBeUndefined();
  });

  it("counts characters after NFKC normalisation, as the password is stored", () => {
    // Eleven accented letters typed in NFD are 22 code points, but eleven characters.
    const elevenNfd = "éèêëàâäîïôö".normalize("NFD");
    expect([...elevenNfd]).toHaveLength(22);
    expect(passwordProblem(elevenNfd)).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem(`${elevenNfd}ü`)).toBeUndefined();
    // Six "ff" ligatures are twelve f: a repeated character.
    expect(passwordProblem("ﬀﬀﬀﬀﬀﬀ")).toBe("PASSWORD_TOO_COMMON");
  });

  it("refuses more than 1024 characters", () => {
    const long = "tangerine-orbit-".repeat(70);
    expect(passwordProblem(long.slice(0, maxPasswordLength))).toBeUndefined();
    expect(passwordProblem(long.slice(0, maxPasswordLength + 1))).toBe("PASSWORD_TOO_LONG");
  });

  it("has no composition rules: lower-case letters and spaces alone pass", () => {
    expect(passwordProblem("walnut lantern drizzle")).toBeUndefined();
    expect(passwordProblem("walnutlanterndrizzle")).toBeUndefined();
  });

  it("refuses common passwords in any letter case", () => {
    for (const p of ["password1234", "Password1234", "PASSWORD1234", "Qwerty123456"]) {
      expect(passwordProblem(p), p).toBe("PASSWORD_TOO_COMMON");
    }
    expect(passwordProblem("iloveyouforever")).toBe("PASSWORD_TOO_COMMON");
    expect(passwordProblem("Summer2025!")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("Traitgate2025!")).toBe("PASSWORD_TOO_COMMON");
  });

  it("refuses repeated and sequential characters", () => {
    for (const p of [
      "aaaaaaaaaaaa",
      "abababababab",
      "123123123123",
      "passpasspass",
      "123456789012",
      "0987654321098",
      "abcdefghijklmn",
      "qwertyuiopasdf",
      "ZYXWVUTSRQPO",
    ]) {
      expect(passwordProblem(p), p).toBe("PASSWORD_TOO_COMMON");
    }
  });

  it("refuses the username as the password, in any letter case", () => {
    expect(passwordProblem("margaret.hamilton", "Margaret.Hamilton")).toBe("PASSWORD_TOO_COMMON");
    expect(passwordProblem("margaret.hamilton", "grace.hopper")).toBeUndefined();
  });

  it("ships a few hundred entries, each long enough to matter, lower case", () => {
    expect(commonPasswords.size).toBeGreaterThanOrEqual(200);
    expect(commonPasswords.size).toBeLessThanOrEqual(1000);
    for (const p of commonPasswords) {
      expect([...p].length, p).toBeGreaterThanOrEqual(minPasswordLength);
      expect(p, p).toBe(p.toLowerCase());
    }
  });

  it("throws invalid_argument naming the field password", () => {
    const err = catchError(() => checkPasswordPolicy("short"));
    expect(err).toMatchObject({
      kind: "invalid_argument",
      reason: "PASSWORD_TOO_SHORT",
      field: "password",
    });
    expect(catchError(() => checkPasswordPolicy("password1234"))).toMatchObject({
      reason: "PASSWORD_TOO_COMMON",
      field: "password",
    });
    expect(() => checkPasswordPolicy("walnut lantern drizzle")).not.toThrow();
  });
});

function catchError(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error("expected a DomainError");
}
