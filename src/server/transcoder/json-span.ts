/**
 * Where the values of a JSON object's top-level members are in its text, without building
 * them: what lets a REST body's `google.protobuf.Struct` field reach its handler as the bytes
 * the client sent (src/server/preset-encoding.ts).
 *
 * Only for text JSON.parse has accepted: it is not a validator, and on anything else its
 * answer means nothing.
 */

const quote = 0x22;
const backslash = 0x5c;

const isSpace = (c: number | undefined) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** The index just past the string starting at `i` (a quote). */
function endOfString(json: Uint8Array, i: number): number {
  let from = i + 1;
  for (;;) {
    // The next quote (natively: strings are most of a payload), unless a backslash escapes it.
    const q = json.indexOf(quote, from);
    if (q < 0) return json.length;
    let backslashes = 0;
    while (json[q - 1 - backslashes] === backslash) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** The index just past the value starting at `i`. */
function endOfValue(json: Uint8Array, i: number): number {
  const first = json[i];
  if (first === quote) return endOfString(json, i);
  if (first === 0x7b || first === 0x5b) {
    let depth = 0;
    for (let j = i; j < json.length; j++) {
      const c = json[j];
      if (c === quote) {
        j = endOfString(json, j) - 1;
      } else if (c === 0x7b || c === 0x5b) {
        depth++;
      } else if (c === 0x7d || c === 0x5d) {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return json.length;
  }
  // A number, true, false or null: up to the next delimiter.
  let j = i;
  while (j < json.length) {
    const c = json[j];
    if (c === 0x2c || c === 0x7d || c === 0x5d || isSpace(c)) break;
    j++;
  }
  return j;
}

const utf8 = new TextDecoder();

/**
 * The [start, end) byte range of the value of each of `keys` that is a member of the JSON
 * object `json`; for a key given twice, its last value (as JSON.parse keeps). Empty when
 * `json` is not an object (or starts with a byte-order mark).
 */
export function topLevelValueSpans(
  json: Uint8Array,
  keys: ReadonlySet<string>,
): Map<string, [number, number]> {
  const spans = new Map<string, [number, number]>();
  let i = 0;
  const skipSpace = () => {
    while (isSpace(json[i])) i++;
  };
  skipSpace();
  if (json[i] !== 0x7b) return spans;
  i++;
  for (;;) {
    skipSpace();
    if (json[i] !== quote) return spans; // "}" (an empty object) or the end
    const keyEnd = endOfString(json, i);
    const raw = json.subarray(i, keyEnd);
    const key = raw.includes(backslash)
      ? (JSON.parse(utf8.decode(raw)) as string)
      : utf8.decode(raw.subarray(1, raw.length - 1));
    i = keyEnd;
    skipSpace();
    i++; // ":"
    skipSpace();
    const start = i;
    i = endOfValue(json, i);
    if (keys.has(key)) spans.set(key, [start, i]);
    skipSpace();
    if (json[i] !== 0x2c) return spans; // "}"
    i++;
  }
}

/**
 * How many object members (keys, at every depth) the JSON value at [start, end) of `json`
 * has, as written: with a key given twice in one object, more than the parsed value has.
 */
export function writtenMemberCount(json: Uint8Array, start: number, end: number): number {
  let count = 0;
  let i = start;
  while (i < end) {
    if (json[i] !== quote) {
      i++;
      continue;
    }
    i = endOfString(json, i);
    let j = i;
    while (isSpace(json[j])) j++;
    if (json[j] === 0x3a) count++; // a string followed by ":" is a key
  }
  return count;
}

/** How many object members (at every depth) a parsed JSON value has. */
export function parsedMemberCount(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  let count = 0;
  if (Array.isArray(value)) {
    for (const item of value) count += parsedMemberCount(item);
    return count;
  }
  for (const key in value) {
    count += 1 + parsedMemberCount((value as Record<string, unknown>)[key]);
  }
  return count;
}
