import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  createSecretKey,
  type KeyObject,
  randomBytes,
} from "node:crypto";

/**
 * Encryption of secrets at rest (MFA secrets, secret settings, plugin
 * credentials): AES-256-GCM under a data key named by a key id, so that keys
 * can rotate. A sealed value is one ASCII string,
 *
 *   tg1.<kid>.<nonce, 12 bytes, base64url>.<ciphertext ‖ 16-byte tag, base64url>
 *
 * and the additional authenticated data is `tg1.<kid>.<context>`, where the
 * context names the place the value belongs to (e.g. "users.mfa_secret:<id>"),
 * so that a value copied to another row or column does not open.
 * See docs/encryption.md.
 */

export interface DataKey {
  id: string;
  /** 32 bytes. Not enumerable on keys made by parseDataKeys, so logging a key shows only its id. */
  key: Uint8Array;
}

export interface DataKeys {
  current: DataKey;
  previous: DataKey[];
}

export type SecretBoxErrorReason = "UNKNOWN_KEY" | "DECRYPT_FAILED" | "MALFORMED";

const messages: Record<SecretBoxErrorReason, string> = {
  UNKNOWN_KEY: "sealed value names a data key that is not configured",
  DECRYPT_FAILED: "sealed value does not open with its key and context",
  MALFORMED: "sealed value is malformed",
};

/**
 * Why a sealed value did not open. The message is fixed per reason: never key
 * material, plaintext or the sealed value itself. Deliberately not a
 * DomainError: the error boundary turns it into a generic `internal` error and
 * logs it, so clients learn nothing about keys.
 */
export class SecretBoxError extends Error {
  override readonly name = "SecretBoxError";
  constructor(
    readonly reason: SecretBoxErrorReason,
    /** UNKNOWN_KEY: the key id named by the value (public, derived by a one-way function). */
    readonly keyId?: string,
  ) {
    super(messages[reason]);
  }
}

export interface SecretBox {
  /** Encrypts under the current key with a fresh random nonce, bound to `context`. */
  seal(plaintext: Uint8Array | string, context: string): string;
  /** Decrypts with the key the value names (current or previous); throws SecretBoxError. */
  open(sealed: string, context: string): Uint8Array;
  /** open, decoded as UTF-8. */
  openString(sealed: string, context: string): string;
  /** True if the value names a key other than the current one; throws MALFORMED on a bad value. */
  needsRotation(sealed: string): boolean;
  /** open, then seal again under the current key. */
  reseal(sealed: string, context: string): string;
}

const version = "tg1";
const keyBytes = 32;
const nonceBytes = 12;
const tagBytes = 16;
const keyIdPattern = /^[A-Za-z0-9_-]{1,64}$/;
const base64urlPattern = /^[A-Za-z0-9_-]*$/;
const base64Pattern = /^[A-Za-z0-9+/]+={0,2}$/;

/** The key id: first 8 bytes of HMAC-SHA256(key, "traitgate key id"), base64url (11 characters). */
export function keyIdOf(key: Uint8Array): string {
  return createHmac("sha256", key)
    .update("traitgate key id")
    .digest()
    .subarray(0, 8)
    .toString("base64url");
}

function decodeKey(value: string, variable: string): Uint8Array {
  const text = value.trim();
  if (text === "") throw new Error(`${variable} is empty; set 32 random bytes, base64-encoded`);
  const bytes = Buffer.from(text, "base64");
  const canonical = bytes.toString("base64").replace(/=+$/, "") === text.replace(/=+$/, "");
  if (!base64Pattern.test(text) || !canonical) {
    throw new Error(`${variable} is not valid base64; set 32 random bytes, base64-encoded`);
  }
  if (bytes.length !== keyBytes) {
    throw new Error(
      `${variable} must be ${keyBytes} bytes, base64-encoded (got ${bytes.length} bytes)`,
    );
  }
  return new Uint8Array(bytes);
}

function dataKey(key: Uint8Array): DataKey {
  const k = { id: keyIdOf(key) } as DataKey;
  Object.defineProperty(k, "key", { value: key, enumerable: false });
  return k;
}

/**
 * Parses DATA_ENCRYPTION_KEY and DATA_ENCRYPTION_KEY_PREVIOUS (comma-separated;
 * blank entries ignored, a copy of the current key dropped). Throws an Error
 * naming the variable, never quoting the value.
 */
export function parseDataKeys(current: string, previous?: string): DataKeys {
  const currentKey = dataKey(decodeKey(current, "DATA_ENCRYPTION_KEY"));
  const seen = new Set([currentKey.id]);
  const previousKeys: DataKey[] = [];
  const entries = (previous ?? "").split(",").map((s) => s.trim());
  for (const [i, entry] of entries.entries()) {
    if (entry === "") continue;
    const key = dataKey(decodeKey(entry, `DATA_ENCRYPTION_KEY_PREVIOUS (entry ${i + 1})`));
    if (seen.has(key.id)) continue;
    seen.add(key.id);
    previousKeys.push(key);
  }
  return { current: currentKey, previous: previousKeys };
}

/** A fresh random data key, base64 (what DATA_ENCRYPTION_KEY expects). */
export function generateDataKey(): string {
  return randomBytes(keyBytes).toString("base64");
}

function strictBase64url(text: string): Buffer | undefined {
  if (!base64urlPattern.test(text)) return undefined;
  const bytes = Buffer.from(text, "base64url");
  return bytes.toString("base64url") === text ? bytes : undefined;
}

interface Parsed {
  kid: string;
  nonce: Buffer;
  ciphertext: Buffer;
  tag: Buffer;
}

function parse(sealed: string): Parsed {
  const parts = typeof sealed === "string" ? sealed.split(".") : [];
  if (parts.length !== 4 || parts[0] !== version) throw new SecretBoxError("MALFORMED");
  const [, kid = "", nonceText = "", bodyText = ""] = parts;
  const nonce = strictBase64url(nonceText);
  const body = strictBase64url(bodyText);
  if (!keyIdPattern.test(kid) || nonce?.length !== nonceBytes || !body || body.length < tagBytes) {
    throw new SecretBoxError("MALFORMED");
  }
  const split = body.length - tagBytes;
  return { kid, nonce, ciphertext: body.subarray(0, split), tag: body.subarray(split) };
}

function checkContext(context: string): void {
  if (typeof context !== "string" || context === "") {
    throw new TypeError("a secret box context must be a non-empty string");
  }
}

const aad = (kid: string, context: string): Buffer =>
  Buffer.from(`${version}.${kid}.${context}`, "utf8");

export function createSecretBox(keys: DataKeys): SecretBox {
  const byId = new Map<string, KeyObject>();
  for (const k of [keys.current, ...keys.previous]) {
    if (!keyIdPattern.test(k.id)) {
      throw new Error("a data key id must be 1-64 base64url characters");
    }
    if (!(k.key instanceof Uint8Array) || k.key.length !== keyBytes) {
      throw new Error(`data key ${k.id} is not ${keyBytes} bytes`);
    }
    if (byId.has(k.id)) throw new Error(`data key id ${k.id} is used twice`);
    byId.set(k.id, createSecretKey(k.key));
  }
  const currentId = keys.current.id;
  const currentKey = byId.get(currentId)!;

  function seal(plaintext: Uint8Array | string, context: string): string {
    checkContext(context);
    const nonce = randomBytes(nonceBytes);
    const cipher = createCipheriv("aes-256-gcm", currentKey, nonce, { authTagLength: tagBytes });
    cipher.setAAD(aad(currentId, context));
    const data = typeof plaintext === "string" ? Buffer.from(plaintext, "utf8") : plaintext;
    const body = Buffer.concat([cipher.update(data), cipher.final(), cipher.getAuthTag()]);
    return `${version}.${currentId}.${nonce.toString("base64url")}.${body.toString("base64url")}`;
  }

  function open(sealed: string, context: string): Uint8Array {
    checkContext(context);
    const { kid, nonce, ciphertext, tag } = parse(sealed);
    const key = byId.get(kid);
    if (!key) throw new SecretBoxError("UNKNOWN_KEY", kid);
    const decipher = createDecipheriv("aes-256-gcm", key, nonce, { authTagLength: tagBytes });
    decipher.setAAD(aad(kid, context));
    decipher.setAuthTag(tag);
    let plain: Buffer;
    try {
      plain = Buffer.concat([decipher.update(ciphertext), decipher.final()]);
    } catch {
      throw new SecretBoxError("DECRYPT_FAILED");
    }
    const out = Uint8Array.from(plain);
    plain.fill(0);
    return out;
  }

  return {
    seal,
    open,
    openString(sealed, context) {
      const bytes = open(sealed, context);
      const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("utf8");
      bytes.fill(0);
      return text;
    },
    needsRotation: (sealed) => parse(sealed).kid !== currentId,
    reseal(sealed, context) {
      const bytes = open(sealed, context);
      try {
        return seal(bytes, context);
      } finally {
        bytes.fill(0);
      }
    },
  };
}
