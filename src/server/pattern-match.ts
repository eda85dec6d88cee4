import { createValidator, type Validator, type ValidatorOptions } from "@bufbuild/protovalidate";
// protovalidate's own engine (the version it pins), for what the platform RegExp does not take.
import { RE2JS } from "@bufbuild/re2";
import { createFastValidator } from "./fast-validate.js";

/** `(pattern, against) => matches`, as protovalidate's `regexMatch` option takes it. */
export type RegexMatcher = NonNullable<ValidatorOptions["regexMatch"]>;

/**
 * protovalidate's `regexMatch` for the schema's `string.pattern` rules: the platform `RegExp`
 * for patterns of a small grammar on which it and RE2 agree and cannot backtrack more than
 * linearly, RE2 (protovalidate's default engine, in JavaScript) for everything else.
 *
 * RE2 in JavaScript takes 1.2–2.5 µs to match a short identifier against our patterns, the
 * platform `RegExp` 50–70 ns (a micro-benchmark on this machine's Node 20): a batch of 50
 * decisions matched its `context` fields 50 times, 3–5 % of the batch's server CPU.
 *
 * The grammar (`nativePattern`): `^`, then elements, then `$`. An element is a character class
 * (`[...]` or `[^...]` of characters, ranges and escapes) or one character, with an optional
 * greedy quantifier (`+`, `*`, `?`, `{n}`, `{n,}`, `{n,m}`, at most 1,000 as in RE2). No groups,
 * alternation, `.`, class escapes (`\s` differs between the two), flags or assertions but the
 * two anchors. On that grammar the two engines mean the same: `^` and `$` are the text's ends
 * (neither engine's `$` matches before a final newline without flags), classes are sets of code
 * points (the `u` flag), quantifiers count code points. And it can be matched in linear time by
 * a backtracking engine when every element of variable length is followed by the end or by an
 * element that needs at least one character, none of them in the first one's set: then a step
 * back into the first one fails at once, so no element is tried at more than a few places.
 * Patterns outside it (or that `RegExp` refuses) go to RE2 as they did.
 */
export function createPatternMatcher(fallback: RegexMatcher = createRe2Matcher()): RegexMatcher {
  const compiled = new Map<string, RegExp | null>();
  return (pattern, against) => {
    let re = compiled.get(pattern);
    if (re === undefined) {
      // Patterns come from the schema, but CEL's matches() may build them from input.
      if (compiled.size >= 1024) compiled.clear();
      re = nativePattern(pattern);
      compiled.set(pattern, re);
    }
    return re === null ? fallback(pattern, against) : re.test(against);
  };
}

/**
 * protovalidate's validator with this module's matcher, behind a quick yes for messages that
 * certainly pass (src/server/fast-validate.ts): what every request is checked with.
 */
export function createSchemaValidator(): Validator {
  const regexMatch = createPatternMatcher();
  return createFastValidator(createValidator({ regexMatch }), regexMatch);
}

/** RE2 with a compile cache, as protovalidate's default matcher (which it does not export). */
export function createRe2Matcher(): RegexMatcher {
  const compiled = new Map<string, RE2JS>();
  return (pattern, against) => {
    let re = compiled.get(pattern);
    if (re === undefined) {
      if (compiled.size >= 1024) compiled.clear();
      re = RE2JS.compile(pattern);
      compiled.set(pattern, re);
    }
    return re.test(against);
  };
}

/** Code point ranges [from, to], sorted and disjoint. */
type CharSet = readonly (readonly [number, number])[];

interface Element {
  set: CharSet;
  min: number;
  max: number;
}

const maxCodePoint = 0x10ffff;
const maxRepeat = 1000;
/** At most this many characters' worth of repeats in a pattern taken (RE2's limit is larger). */
const maxProgram = 10_000;
/** Characters that stand for themselves, in and out of classes, in both engines. */
const plain = /[A-Za-z0-9_@:,=#%&!~'" /<>;`]/;
/** Punctuation both engines take escaped (RegExp's `u` flag allows no other escapes). */
const escapable = "\\.-^$*+?()[]{}|/";

/** The platform RegExp for a pattern of the grammar above, or null (RE2 matches it). */
export function nativePattern(pattern: string): RegExp | null {
  const elements = parse(pattern);
  if (elements === null || !linear(elements)) return null;
  try {
    return new RegExp(pattern, "u");
  } catch {
    return null;
  }
}

function parse(pattern: string): Element[] | null {
  if (!pattern.startsWith("^") || !pattern.endsWith("$") || pattern.endsWith("\\$")) return null;
  const body = pattern.slice(1, -1);
  const elements: Element[] = [];
  let i = 0;
  while (i < body.length) {
    let set: CharSet | null;
    if (body[i] === "[") {
      const end = classEnd(body, i);
      if (end < 0) return null;
      set = parseClass(body.slice(i + 1, end));
      i = end + 1;
    } else {
      const c = char(body, i);
      if (c === null) return null;
      set = [[c.code, c.code]];
      i = c.next;
    }
    if (set === null) return null;
    const q = quantifier(body, i);
    if (q === null) return null;
    elements.push({ set, min: q.min, max: q.max });
    i = q.next;
  }
  return elements;
}

/** The index of the `]` closing the class opened at `start`, or -1. */
function classEnd(body: string, start: number): number {
  for (let i = start + 1; i < body.length; i++) {
    if (body[i] === "\\") i++;
    else if (body[i] === "[") return -1;
    else if (body[i] === "]") return i;
  }
  return -1;
}

/** One character: plain (or `.` in a class), an escaped punctuation mark or `\xHH`. */
function char(s: string, i: number, inClass = false): { code: number; next: number } | null {
  const c = s[i];
  if (c === undefined) return null;
  if (c !== "\\") {
    return plain.test(c) || (inClass && c === ".") ? { code: c.charCodeAt(0), next: i + 1 } : null;
  }
  const e = s[i + 1];
  if (e === undefined) return null;
  if (escapable.includes(e)) return { code: e.charCodeAt(0), next: i + 2 };
  if (e === "x" && /^[0-9A-Fa-f]{2}$/.test(s.slice(i + 2, i + 4))) {
    return { code: Number.parseInt(s.slice(i + 2, i + 4), 16), next: i + 4 };
  }
  return null;
}

function parseClass(inner: string): CharSet | null {
  const negated = inner.startsWith("^");
  const items = negated ? inner.slice(1) : inner;
  if (items.length === 0) return null;
  const ranges: [number, number][] = [];
  let i = 0;
  while (i < items.length) {
    // A "-" first or last stands for itself; elsewhere it makes a range.
    if (items[i] === "-" && (i === 0 || i === items.length - 1)) {
      ranges.push([45, 45]);
      i++;
      continue;
    }
    const from = char(items, i, true);
    if (from === null) return null;
    i = from.next;
    if (items[i] === "-" && i + 1 < items.length) {
      const to = char(items, i + 1, true);
      if (to === null || to.code < from.code) return null;
      ranges.push([from.code, to.code]);
      i = to.next;
    } else {
      ranges.push([from.code, from.code]);
    }
  }
  const set = normalize(ranges);
  return negated ? complement(set) : set;
}

function quantifier(s: string, i: number): { min: number; max: number; next: number } | null {
  const c = s[i];
  let q: { min: number; max: number; next: number };
  if (c === "+") q = { min: 1, max: Number.POSITIVE_INFINITY, next: i + 1 };
  else if (c === "*") q = { min: 0, max: Number.POSITIVE_INFINITY, next: i + 1 };
  else if (c === "?") q = { min: 0, max: 1, next: i + 1 };
  else if (c === "{") {
    const m = /^\{(\d{1,4})(,(\d{0,4}))?\}/.exec(s.slice(i));
    if (m === null) return null;
    const min = Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === "" ? Number.POSITIVE_INFINITY : Number(m[3]);
    if (min > maxRepeat || (max !== Number.POSITIVE_INFINITY && (max > maxRepeat || max < min)))
      return null;
    q = { min, max, next: i + m[0].length };
  } else return { min: 1, max: 1, next: i };
  // A lazy or possessive mark, or a quantifier on a quantifier: not in the grammar.
  const after = s[q.next];
  if (after === "?" || after === "+" || after === "*" || after === "{") return null;
  return q;
}

/** Every element of variable length is followed by the end, or by a mandatory element of a disjoint set. */
function linear(elements: readonly Element[]): boolean {
  // RE2 refuses programs it finds too large ("expression too large"); so do we, well before.
  let size = 0;
  for (const e of elements) size += Number.isFinite(e.max) ? e.max : e.min + 1;
  if (size > maxProgram) return false;
  for (let i = 0; i < elements.length; i++) {
    const e = elements[i] as Element;
    if (e.min === e.max) continue;
    const next = elements[i + 1];
    if (next === undefined) continue;
    if (next.min < 1 || intersects(e.set, next.set)) return false;
  }
  return true;
}

function normalize(ranges: [number, number][]): CharSet {
  ranges.sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const [from, to] of ranges) {
    const last = out[out.length - 1];
    if (last !== undefined && from <= last[1] + 1) last[1] = Math.max(last[1], to);
    else out.push([from, to]);
  }
  return out;
}

function complement(set: CharSet): CharSet {
  const out: [number, number][] = [];
  let next = 0;
  for (const [from, to] of set) {
    if (from > next) out.push([next, from - 1]);
    next = to + 1;
  }
  if (next <= maxCodePoint) out.push([next, maxCodePoint]);
  return out;
}

function intersects(a: CharSet, b: CharSet): boolean {
  for (const [af, at] of a) for (const [bf, bt] of b) if (af <= bt && bf <= at) return true;
  return false;
}
