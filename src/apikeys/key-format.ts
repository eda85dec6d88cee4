import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * The form of an API key: `tgk_<prefix>_<secret>`, 56 characters.
 *
 * - `tgk_` says what it is (secret scanners and people recognise it);
 * - `<prefix>`: 8 characters of [a-z2-7] (40 random bits), unique, stored in clear to find
 *   the key's row and shown to administrators to tell keys apart;
 * - `<secret>`: 43 base64url characters, 256 random bits, never stored: only SHA-256 of the
 *   whole key is.
 */
export const keyType = "tgk";

const prefixAlphabet = "abcdefghijklmnopqrstuvwxyz234567";
const keyPattern = /^tgk_([a-z2-7]{8})_([A-Za-z0-9_-]{43})$/;

export interface ParsedKey {
  prefix: string;
}

export interface NewKey {
  /** The whole key, shown to its creator once. */
  key: string;
  prefix: string;
  /** hex(sha256(key)): what is stored. */
  secretHash: string;
}

/** 8 characters of base32 (RFC 4648 alphabet, lower case) from 5 random bytes. */
function randomPrefix(): string {
  const bytes = randomBytes(5);
  let bits = 0n;
  for (const b of bytes) bits = (bits << 8n) | BigInt(b);
  let out = "";
  for (let i = 7; i >= 0; i--) out += prefixAlphabet[Number((bits >> BigInt(i * 5)) & 31n)];
  return out;
}

export function generateKey(): NewKey {
  const prefix = randomPrefix();
  const key = `${keyType}_${prefix}_${randomBytes(32).toString("base64url")}`;
  return { key, prefix, secretHash: hashKey(key) };
}

/** The key's prefix, or undefined when the text is not an API key's form. */
export function parseKey(text: string): ParsedKey | undefined {
  const match = keyPattern.exec(text);
  return match?.[1] === undefined ? undefined : { prefix: match[1] };
}

/** hex(sha256(key)). */
export function hashKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

/** Compares the key's digest with a stored one in constant time (both 32 bytes). */
export function keyMatches(key: string, storedHash: string): boolean {
  const presented = createHash("sha256").update(key, "utf8").digest();
  const stored = Buffer.from(storedHash, "hex");
  if (stored.length !== presented.length) return false;
  return timingSafeEqual(presented, stored);
}

/** A digest no key has, compared against for unknown prefixes so they cost the same. */
export const unknownKeyHash = "0".repeat(64);
