import { randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { describe, expect, it } from "vitest";
import {
  createSecretBox,
  type DataKeys,
  generateDataKey,
  parseDataKeys,
  SecretBoxError,
  type SecretBoxErrorReason,
} from "../../src/crypto/secret-box.js";

const keyA = generateDataKey();
const keyB = generateDataKey();
const ctx = "users.mfa_secret:7f3c";
const secret = "JBSWY3DPEHPK3PXP-totp-secret";

function boxOf(current: string, previous?: string) {
  return createSecretBox(parseDataKeys(current, previous));
}

/** The reason of the SecretBoxError that `fn` throws, checking its message leaks nothing. */
function reasonOf(fn: () => unknown, ...notInMessage: string[]): SecretBoxErrorReason {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SecretBoxError);
    const e = err as SecretBoxError;
    for (const s of [secret, keyA, keyB, ...notInMessage]) expect(e.message).not.toContain(s);
    return e.reason;
  }
  throw new Error("expected a SecretBoxError");
}

/** Flips one bit of byte `at` (negative: from the end) of part `part` of a sealed value. */
function flip(sealed: string, part: number, at: number): string {
  const parts = sealed.split(".");
  const bytes = Buffer.from(parts[part]!, "base64url");
  const i = at < 0 ? bytes.length + at : at;
  bytes[i] = bytes[i]! ^ 0x01;
  parts[part] = bytes.toString("base64url");
  return parts.join(".");
}

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/**
 * Sets an unused low bit of the last base64url character: the text decodes to
 * the same bytes but is not their canonical encoding. The 28-byte secret plus
 * the 16-byte tag is 44 bytes, so the body's last character carries 2 spare bits.
 */
function nonCanonical(sealed: string): string {
  const last = alphabet.indexOf(sealed.at(-1)!);
  return sealed.slice(0, -1) + alphabet[last ^ 1];
}

describe("secret box", () => {
  const box = boxOf(keyA);

  it("round-trips strings, bytes and empty plaintext", () => {
    expect(box.openString(box.seal(secret, ctx), ctx)).toBe(secret);
    expect(box.openString(box.seal("grüße ✓", ctx), ctx)).toBe("grüße ✓");
    const bytes = new Uint8Array(randomBytes(100));
    expect(box.open(box.seal(bytes, ctx), ctx)).toEqual(bytes);
    expect(box.open(box.seal(new Uint8Array(0), ctx), ctx)).toEqual(new Uint8Array(0));
    expect(box.openString(box.seal("", ctx), ctx)).toBe("");
  });

  it("produces a compact ASCII value that names the key and hides the plaintext", () => {
    const sealed = box.seal(secret, ctx);
    const kid = parseDataKeys(keyA).current.id;
    expect(sealed).toMatch(new RegExp(`^tg1\\.${kid}\\.[A-Za-z0-9_-]{16}\\.[A-Za-z0-9_-]+$`));
    expect(sealed).not.toContain(secret);
    expect(sealed).not.toContain(Buffer.from(secret).toString("base64url").slice(0, 12));
  });

  it("uses a fresh nonce for every seal", () => {
    const values = new Set(Array.from({ length: 200 }, () => box.seal(secret, ctx)));
    expect(values.size).toBe(200);
    const nonces = new Set([...values].map((v) => v.split(".")[2]));
    expect(nonces.size).toBe(200);
  });

  it("refuses a value moved to another context", () => {
    const sealed = box.seal(secret, ctx);
    expect(reasonOf(() => box.open(sealed, "users.mfa_secret:other"))).toBe("DECRYPT_FAILED");
    expect(reasonOf(() => box.open(sealed, "settings.data_source"))).toBe("DECRYPT_FAILED");
    expect(() => box.open(sealed, "")).toThrow(TypeError);
    expect(() => box.seal(secret, "")).toThrow(TypeError);
  });

  it.each([
    ["the nonce", 2, 0],
    ["the ciphertext", 3, 0],
    ["the tag", 3, -1],
  ])("detects a flipped bit in %s", (_, part, at) => {
    const sealed = box.seal(secret, ctx);
    expect(reasonOf(() => box.open(flip(sealed, part, at), ctx))).toBe("DECRYPT_FAILED");
  });

  it("detects tampering with the tag of an empty plaintext", () => {
    const sealed = box.seal("", ctx);
    expect(reasonOf(() => box.open(flip(sealed, 3, 0), ctx))).toBe("DECRYPT_FAILED");
  });

  it("refuses a value sealed under a key it does not have, naming the key id only", () => {
    const sealed = boxOf(keyB).seal(secret, ctx);
    expect(reasonOf(() => box.open(sealed, ctx))).toBe("UNKNOWN_KEY");
    try {
      box.open(sealed, ctx);
    } catch (err) {
      expect((err as SecretBoxError).keyId).toBe(parseDataKeys(keyB).current.id);
    }
  });

  it("refuses a value whose key id was swapped for another configured key", () => {
    const both = boxOf(keyA, keyB);
    const sealed = both.seal(secret, ctx);
    const swapped = sealed.replace(parseDataKeys(keyA).current.id, parseDataKeys(keyB).current.id);
    expect(reasonOf(() => both.open(swapped, ctx))).toBe("DECRYPT_FAILED");
  });

  it("opens values sealed under a previous key and moves them to the current one", () => {
    const old = boxOf(keyA).seal(secret, ctx);
    const rotated = boxOf(keyB, ` ${keyA} ,`);
    expect(rotated.openString(old, ctx)).toBe(secret);
    expect(rotated.needsRotation(old)).toBe(true);

    const resealed = rotated.reseal(old, ctx);
    expect(resealed.split(".")[1]).toBe(parseDataKeys(keyB).current.id);
    expect(rotated.needsRotation(resealed)).toBe(false);
    expect(rotated.openString(resealed, ctx)).toBe(secret);
    // Once the previous key is dropped, only the resealed value opens.
    const after = boxOf(keyB);
    expect(after.openString(resealed, ctx)).toBe(secret);
    expect(reasonOf(() => after.open(old, ctx))).toBe("UNKNOWN_KEY");
    // Resealing keeps the context binding.
    expect(reasonOf(() => rotated.reseal(old, "elsewhere"))).toBe("DECRYPT_FAILED");
  });

  it.each([
    ["an empty string", () => ""],
    ["a wrong prefix", (s: string) => s.replace(/^tg1\./, "tg2.")],
    ["no prefix", (s: string) => s.slice(4)],
    ["too few parts", (s: string) => s.split(".").slice(0, 3).join(".")],
    ["too many parts", (s: string) => `${s}.AAAA`],
    ["an empty key id", (s: string) => s.replace(/^tg1\.[^.]+\./, "tg1..")],
    ["bad base64 in the nonce", (s: string) => s.replace(/^(tg1\.[^.]+\.)./, "$1!")],
    ["padded base64", (s: string) => `${s}==`],
    ["non-canonical base64", nonCanonical],
    ["a short nonce", (s: string) => s.replace(/^(tg1\.[^.]+\.)[^.]+/, "$1AAAAAAAAAAA")],
    ["a body shorter than a tag", (s: string) => s.replace(/[^.]+$/, "AAAAAAAA")],
  ])("refuses %s as MALFORMED", (_, mangle) => {
    const sealed = mangle(box.seal(secret, ctx));
    expect(reasonOf(() => box.open(sealed, ctx))).toBe("MALFORMED");
    expect(reasonOf(() => box.needsRotation(sealed))).toBe("MALFORMED");
  });

  it("refuses invalid key sets", () => {
    const { current } = parseDataKeys(keyA);
    expect(() => createSecretBox({ current, previous: [current] })).toThrow(/used twice/);
    const short: DataKeys = { current: { id: "abc", key: new Uint8Array(16) }, previous: [] };
    expect(() => createSecretBox(short)).toThrow(/32 bytes/);
    const dotted: DataKeys = { current: { id: "a.b", key: new Uint8Array(32) }, previous: [] };
    expect(() => createSecretBox(dotted)).toThrow(/key id/);
  });
});

describe("data keys", () => {
  it("derives stable, distinct key ids that do not reveal the key", () => {
    const a1 = parseDataKeys(keyA).current;
    const a2 = parseDataKeys(` ${keyA}\n`).current;
    const b = parseDataKeys(keyB).current;
    expect(a1.id).toBe(a2.id);
    expect(a1.id).not.toBe(b.id);
    expect(a1.id).toMatch(/^[A-Za-z0-9_-]{11}$/);
    const raw = Buffer.from(keyA, "base64");
    expect(a1.key).toEqual(new Uint8Array(raw));
    expect(raw.includes(Buffer.from(a1.id, "base64url"))).toBe(false);
    expect(keyA).not.toContain(a1.id);
    expect(raw.toString("base64url")).not.toContain(a1.id);
    expect(raw.toString("hex")).not.toContain(Buffer.from(a1.id, "base64url").toString("hex"));
  });

  it("keeps key bytes out of JSON and inspection of a parsed key", () => {
    const keys = parseDataKeys(keyA, keyB);
    const text = JSON.stringify(keys);
    expect(text).toContain(keys.current.id);
    expect(text).not.toContain('"key"');
    expect(inspect(keys, { depth: 5 })).not.toContain("Uint8Array");
  });

  it("reads previous keys, ignoring blanks and a copy of the current key", () => {
    const keys = parseDataKeys(keyA, `${keyB}, ,${keyA},${keyB}`);
    expect(keys.previous.map((k) => k.id)).toEqual([parseDataKeys(keyB).current.id]);
    expect(parseDataKeys(keyA, "").previous).toEqual([]);
    expect(parseDataKeys(keyA).previous).toEqual([]);
  });

  it("accepts base64 without padding", () => {
    expect(parseDataKeys(keyA.replace(/=+$/, "")).current.id).toBe(parseDataKeys(keyA).current.id);
  });

  const wrong = randomBytes(16).toString("base64");
  it.each([
    ["empty", ""],
    ["too short", wrong],
    ["too long", randomBytes(48).toString("base64")],
    ["not base64", `${keyA.slice(0, 40)}!!!=`],
    ["base64url rather than base64", "-".repeat(43)],
    ["a passphrase", "quiet harbour lantern 4721"],
  ])("refuses a DATA_ENCRYPTION_KEY that is %s, naming it and not quoting it", (_, value) => {
    expect(() => parseDataKeys(value)).toThrow(/DATA_ENCRYPTION_KEY/);
    try {
      parseDataKeys(value);
    } catch (err) {
      if (value !== "") expect((err as Error).message).not.toContain(value);
    }
  });

  it("refuses a bad DATA_ENCRYPTION_KEY_PREVIOUS entry, naming the variable and entry", () => {
    expect(() => parseDataKeys(keyA, `${keyB},${wrong}`)).toThrow(
      /DATA_ENCRYPTION_KEY_PREVIOUS \(entry 2\)/,
    );
    expect(() => parseDataKeys(keyA, "nope")).toThrow(/DATA_ENCRYPTION_KEY_PREVIOUS/);
  });

  it("generates distinct 32-byte keys", () => {
    const a = generateDataKey();
    expect(Buffer.from(a, "base64")).toHaveLength(32);
    expect(a).not.toBe(generateDataKey());
    expect(boxOf(a).openString(boxOf(a).seal("x", ctx), ctx)).toBe("x");
  });
});
