import type { DecisionAnswer } from "./decisions.js";
import type { TraitDerivation } from "./explain.js";

/**
 * `EvaluateResponse` and `EvaluateBatchResponse` in the protobuf binary format, written from
 * the answers with what repeats encoded once: the policy engine's answers are frozen and shared
 * (one per matched rule or set of rules), so fields 1–8 of an answer (decision, reason code,
 * reason, deciding rule, matched rules, sanitize, errors, policy version) are the same bytes
 * every time the engine gives that answer, and a derivation's `via` list is shared too. Only
 * the decision id is new per answer. protobuf-es encoded every field of every answer again:
 * about 12 % of an `EvaluateBatch`'s server CPU in a profile (the buffer grown by doubling, each
 * string encoded, 50 answers of ~300 bytes).
 *
 * The bytes are those protobuf-es writes for the same message (fields in number order, unset
 * and empty fields left out, strings in UTF-8): test/policy/decision-binary.test.ts compares
 * them for answers of every shape, so a field added to the messages fails it. Sent through the
 * gRPC path's preset encoding (src/server/preset-encoding.ts); other paths encode the message.
 */

const utf8 = new TextEncoder();

/** Fields 1–8 of an answer, encoded, with the values they were encoded from (copied). */
interface Prefix {
  decision: string;
  reasonCode: string;
  reason: string;
  decidingRule: string | undefined;
  matchedRules: readonly string[];
  sanitize: DecisionAnswer["sanitize"];
  policyVersion: string;
  bytes: Uint8Array;
}

/**
 * By the answer's matched-rules list: the engine's are frozen and shared per answer. The
 * entry is used only when every field is the same value it was encoded from (two answers may
 * share a list: "no rule matched" of two policy versions), so a stale entry cannot be sent.
 */
const prefixes = new WeakMap<readonly string[], Prefix>();
const derivations = new WeakMap<readonly string[], { trait: string; bytes: Uint8Array }>();

export function encodeEvaluateResponse(answer: DecisionAnswer): Uint8Array {
  const pieces: Uint8Array[] = [];
  const out = new Output(collect(answer, pieces));
  write(out, answer, pieces, 0);
  return out.bytes;
}

export function encodeEvaluateBatchResponse(answers: readonly DecisionAnswer[]): Uint8Array {
  // One pass finds each answer's kept pieces and sizes, the next writes them.
  const pieces: Uint8Array[] = [];
  const sizes = new Array<number>(answers.length);
  let total = 0;
  for (let i = 0; i < answers.length; i++) {
    const size = collect(answers[i]!, pieces);
    sizes[i] = size;
    total += 1 + varintSize(size) + size;
  }
  const out = new Output(total);
  let next = 0;
  for (let i = 0; i < answers.length; i++) {
    out.tag(1);
    out.varint(sizes[i]!);
    next = write(out, answers[i]!, pieces, next);
  }
  return out.bytes;
}

/** Appends the answer's prefix and derivations to `pieces`; the answer's encoded size. */
function collect(answer: DecisionAnswer, pieces: Uint8Array[]): number {
  const prefix = prefixOf(answer);
  pieces.push(prefix);
  let size = prefix.length + stringFieldSize(answer.decisionId);
  for (const t of answer.impliedTraits) {
    const derivation = derivationOf(t);
    pieces.push(derivation);
    size += derivation.length;
  }
  return size;
}

/** Writes the answer from its pieces, which start at `at`; the index after them. */
function write(out: Output, answer: DecisionAnswer, pieces: Uint8Array[], at: number): number {
  let next = at;
  out.raw(pieces[next++]!);
  out.stringField(9, answer.decisionId);
  for (let k = 0; k < answer.impliedTraits.length; k++) out.raw(pieces[next++]!);
  return next;
}

function prefixOf(answer: DecisionAnswer): Uint8Array {
  if (!unchangeable(answer)) return encodePrefix(answer);
  const kept = prefixes.get(answer.matchedRules);
  if (kept !== undefined && samePrefix(kept, answer)) return kept.bytes;
  const bytes = encodePrefix(answer);
  prefixes.set(answer.matchedRules, {
    decision: answer.decision,
    reasonCode: answer.reasonCode,
    reason: answer.reason,
    decidingRule: answer.decidingRule,
    matchedRules: answer.matchedRules,
    sanitize: answer.sanitize,
    policyVersion: answer.policyVersion,
    bytes,
  });
  return bytes;
}

/** Lists and spec frozen, no errors: fields 1–8 are what they were when first encoded. */
const unchangeable = (a: DecisionAnswer): boolean =>
  Object.isFrozen(a.matchedRules) &&
  (a.sanitize === undefined ||
    (Object.isFrozen(a.sanitize) &&
      Object.isFrozen(a.sanitize.fields) &&
      Object.isFrozen(a.sanitize.classifications))) &&
  (a.errors === undefined || a.errors.length === 0);

/** Whether `b` (unchangeable: no errors, frozen lists) has the fields `a` was encoded from. */
const samePrefix = (a: Prefix, b: DecisionAnswer): boolean =>
  a.decision === b.decision &&
  a.reasonCode === b.reasonCode &&
  a.reason === b.reason &&
  a.decidingRule === b.decidingRule &&
  a.matchedRules === b.matchedRules &&
  a.sanitize === b.sanitize &&
  a.policyVersion === b.policyVersion;

function encodePrefix(a: DecisionAnswer): Uint8Array {
  const parts = new Parts();
  parts.string(1, a.decision);
  parts.string(2, a.reasonCode);
  parts.string(3, a.reason);
  // Set only when non-empty, as the message builder does (src/policy/decision-message.ts).
  if (a.decidingRule) parts.string(4, a.decidingRule, true);
  for (const rule of a.matchedRules) parts.string(5, rule, true);
  if (a.sanitize) {
    const spec = new Parts();
    for (const f of a.sanitize.fields) spec.string(1, f, true);
    for (const c of a.sanitize.classifications) spec.string(2, c, true);
    parts.message(6, spec);
  }
  for (const e of a.errors ?? []) {
    const error = new Parts();
    error.string(1, e.ruleId);
    error.string(2, e.message);
    parts.message(7, error);
  }
  parts.string(8, a.policyVersion);
  return parts.bytes();
}

/** A derivation as field 10 of its answer (tag, length, message). */
function derivationOf(t: TraitDerivation): Uint8Array {
  const kept = Object.isFrozen(t.via) ? derivations.get(t.via) : undefined;
  if (kept !== undefined && kept.trait === t.trait) return kept.bytes;
  const body = new Parts();
  body.string(1, t.trait);
  for (const name of t.via) body.string(2, name, true);
  const field = new Parts();
  field.message(10, body);
  const bytes = field.bytes();
  if (Object.isFrozen(t.via)) derivations.set(t.via, { trait: t.trait, bytes });
  return bytes;
}

/** Pieces of a message being encoded, for the parts built once. */
class Parts {
  readonly #chunks: Uint8Array[] = [];
  #size = 0;

  /** A string field; an empty one is left out unless `always` (list items, set optionals). */
  string(field: number, value: string, always = false): void {
    if (value === "" && !always) return;
    this.message(field, { bytes: () => utf8.encode(value) });
  }

  message(field: number, body: { bytes(): Uint8Array }): void {
    const content = body.bytes();
    const head = new Output(varintSize(field << 3) + varintSize(content.length));
    head.tag(field);
    head.varint(content.length);
    this.#chunks.push(head.bytes, content);
    this.#size += head.bytes.length + content.length;
  }

  bytes(): Uint8Array {
    const out = new Uint8Array(this.#size);
    let at = 0;
    for (const chunk of this.#chunks) {
      out.set(chunk, at);
      at += chunk.length;
    }
    return out;
  }
}

/** A buffer of a known size, written from the front. */
class Output {
  readonly bytes: Uint8Array;
  #at = 0;

  constructor(size: number) {
    this.bytes = new Uint8Array(size);
  }

  /** A length-delimited field's tag (wire type 2). */
  tag(field: number): void {
    this.varint((field << 3) | 2);
  }

  varint(value: number): void {
    let v = value;
    while (v > 0x7f) {
      this.bytes[this.#at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.bytes[this.#at++] = v;
  }

  raw(chunk: Uint8Array): void {
    this.bytes.set(chunk, this.#at);
    this.#at += chunk.length;
  }

  /** A string field (left out when empty). */
  stringField(field: number, value: string): void {
    if (value === "") return;
    this.tag(field);
    // ASCII under 128 characters (a decision id) byte by byte; anything else by TextEncoder.
    const bytes = this.bytes;
    const start = this.#at + 1;
    let k = 0;
    if (value.length < 0x80) {
      for (; k < value.length; k++) {
        const c = value.charCodeAt(k);
        if (c >= 0x80) break;
        bytes[start + k] = c;
      }
      if (k === value.length) {
        bytes[this.#at] = k;
        this.#at = start + k;
        return;
      }
    }
    const { written } = utf8.encodeInto(value, this.bytes.subarray(this.#at + 1));
    // The length takes one byte for strings under 128 bytes, as a decision id's; longer ones
    // are moved along once their length is known.
    if (written < 0x80) {
      this.bytes[this.#at] = written;
      this.#at += 1 + written;
      return;
    }
    const body = this.bytes.slice(this.#at + 1, this.#at + 1 + written);
    this.varint(written);
    this.raw(body);
  }
}

function stringFieldSize(value: string): number {
  if (value === "") return 0;
  const length = utf8Length(value);
  return 1 + varintSize(length) + length;
}

function varintSize(value: number): number {
  let size = 1;
  for (let v = value; v > 0x7f; v >>>= 7) size++;
  return size;
}

/** UTF-8 length of a string (unpaired surrogates as U+FFFD's three bytes, as TextEncoder). */
function utf8Length(s: string): number {
  let length = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) length += 1;
    else if (c < 0x800) length += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        length += 4;
        i++;
      } else length += 3;
    } else length += 3;
  }
  return length;
}
