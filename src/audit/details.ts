/**
 * An event's details as the audit log keeps them: plain JSON that PostgreSQL's jsonb stores
 * and gives back unchanged (after canonical re-encoding), with secrets and personal data
 * replaced by "[redacted]" at any depth. Runs in the caller's `write`, so a value that cannot
 * be kept fails that caller alone, never the batch it would have joined.
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

export const redacted = "[redacted]";

/**
 * Keys whose values are never kept, compared after lower-casing and dropping everything but
 * letters and digits ("Refresh-Token", "refresh_token" and "refreshToken" are one key).
 * docs/audit.md lists them; change both together.
 */
const sensitiveKeys = new Set([
  "authorization",
  "cookie",
  "setcookie",
  "password",
  "passwordhash",
  "secret",
  "token",
  "code",
  "totpcode",
  "recoverycode",
  "recoverycodes",
  "otpauthuri",
  "apikey",
  "xapikey",
  "privatekey",
  "payload",
  "content",
  "email",
  "emailaddress",
  "newemail",
  "phone",
  "phonenumber",
  "ssn",
  "datasource",
  "connectionstring",
  "dbconnection",
]);

/** Endings that make any key sensitive: newPassword, client_secret, access_tokens, jwt_secret. */
const sensitiveEnding = /(password|secret|token|apikey|privatekey)s?$/;

export function isSensitiveKey(key: string): boolean {
  let known = sensitiveByKey.get(key);
  if (known === undefined) {
    const folded = key.toLowerCase().replace(/[^a-z0-9]/g, "");
    known = sensitiveKeys.has(folded) || sensitiveEnding.test(folded);
    // Events repeat the same few keys: each is folded once. Keys are caller input too (a
    // context's attribute names), so the memo is bounded, in entries and in their length.
    if (key.length <= maxRememberedKeyLength) {
      if (sensitiveByKey.size >= maxRememberedKeys) sensitiveByKey.clear();
      sensitiveByKey.set(key, known);
    }
  }
  return known;
}

const sensitiveByKey = new Map<string, boolean>();
const maxRememberedKeys = 4096;
const maxRememberedKeyLength = 128;

/** Values that are credentials whatever their key: bearer headers and JWTs. */
const credentialValue = /^(bearer\s+\S|eyJ[\w-]*\.eyJ[\w-]*\.[\w-]*$)/i;

const maxDepth = 32;

/**
 * Details → JSON with JSON.stringify's rules (toJSON, undefined and functions dropped,
 * non-finite numbers null), bigint as its decimal string, strings made storable, sensitive
 * keys and credential values redacted. Throws a TypeError for cycles or nesting deeper
 * than 32.
 */
export function prepareDetails(details: Readonly<Record<string, unknown>> | undefined): JsonObject {
  if (details === undefined || details === null) return {};
  const value = toJson(details, 0, new Set());
  if (value === undefined || value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError("audit details must be an object");
  }
  return value;
}

/** Any value as the audit log keeps it: prepareDetails for a value that need not be an object. */
export function prepareValue(value: unknown): JsonValue {
  return toJson(value, 0, new Set()) ?? null;
}

function toJson(value: unknown, depth: number, ancestors: Set<object>): JsonValue | undefined {
  switch (typeof value) {
    case "string":
      return credentialValue.test(value) ? redacted : storableText(value);
    case "number":
      return Number.isFinite(value) ? value : null;
    case "boolean":
      return value;
    case "bigint":
      return value.toString();
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) return null;
  const object = value as object;
  const toJSON = (object as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    return toJson(toJSON.call(object) as unknown, depth, ancestors);
  }
  if (depth >= maxDepth) throw new TypeError(`audit details are nested deeper than ${maxDepth}`);
  if (ancestors.has(object)) throw new TypeError("audit details contain a cycle");
  ancestors.add(object);
  try {
    if (Array.isArray(object)) {
      return object.map((item: unknown) => toJson(item, depth + 1, ancestors) ?? null);
    }
    const entries: [string, JsonValue][] = [];
    for (const [key, item] of Object.entries(object)) {
      if (isSensitiveKey(key)) {
        entries.push([storableText(key), redacted]);
        continue;
      }
      const json = toJson(item, depth + 1, ancestors);
      if (json !== undefined) entries.push([storableText(key), json]);
    }
    // fromEntries defines own properties, so a "__proto__" key stays a key.
    return Object.fromEntries(entries) as JsonObject;
  } finally {
    ancestors.delete(object);
  }
}

/**
 * The longest text kept of one value: events describe what happened, they do not store
 * payloads, and a caller must not be able to make one event large (anonymous refusals
 * are recorded too).
 */
export const maxTextChars = 1024;

/** A character storableText may have to replace. */
const maybeUnstorable = /[\0\uD800-\uDFFF]/;

/**
 * A string PostgreSQL accepts in text and jsonb, at most `maxChars` long (cut with a
 * note of how much was left out): NUL and unpaired UTF-16 surrogates (which
 * PostgreSQL refuses, failing the whole batch) become U+FFFD.
 */
export function storableText(text: string, maxChars = maxTextChars): string {
  const bounded =
    text.length > maxChars ? `${text.slice(0, maxChars)}…[${text.length - maxChars} more]` : text;
  // Most text has neither NUL nor a surrogate: one scan for them, not the replacement's.
  if (!maybeUnstorable.test(bounded)) return bounded;
  return bounded.replace(
    /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g,
    "\uFFFD",
  );
}
