import {
  type DescField,
  type DescMessage,
  getOption,
  hasOption,
  isMessage,
  type JsonObject,
  toJson,
} from "@bufbuild/protobuf";
import { Edition, FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import type { Validator } from "@bufbuild/protovalidate";
import {
  FieldRulesSchema,
  field as fieldRules,
  message as messageRules,
  oneof as oneofRules,
} from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import type { RegexMatcher } from "./pattern-match.js";

/**
 * A quick yes for requests that pass their schema's rules, in front of protovalidate.
 *
 * protovalidate reads every field through its reflection API and walks a path cursor as it
 * goes: for `EvaluateBatch` (50 requests, four rules each) 5–6 % of the server's CPU in a
 * profile, for a message that is almost always valid. The rules our schemas use are few
 * (string lengths, patterns and UUIDs, list sizes, an int64 bound, defined enums, required,
 * ignore), so each request message type gets, once, a plain function over its fields for them.
 * It answers only "valid": anything it does not find valid (a rule broken, a value it does not
 * judge, such as a string longer than its bound in UTF-16 units) goes to protovalidate, which
 * gives the answer and its violations as before. A message type with any rule outside that set
 * (CEL, message or oneof rules, map rules, other kinds), and any type not in a proto3 file, is
 * protovalidate's alone.
 *
 * So it can only be wrong by saying "valid" to a message protovalidate refuses; the
 * differential test (test/unit/fast-validate.test.ts) generates messages of every request type
 * around each rule's edges and checks that never happens.
 */
export function createFastValidator(inner: Validator, matcher: RegexMatcher): Validator {
  const checks = new Map<DescMessage, Check | null>();
  const checkOf = (desc: DescMessage): Check | null => {
    let check = checks.get(desc);
    if (check === undefined) {
      check = compileMessage(desc, matcher, new Set());
      checks.set(desc, check);
    }
    return check;
  };
  return {
    validate(schema, message) {
      if (isMessage(message, schema)) {
        const check = checkOf(schema);
        if (check?.(message as unknown as Fields)) {
          return { kind: "valid", message, error: undefined, violations: undefined } as never;
        }
      }
      return inner.validate(schema, message);
    },
  };
}

type Fields = Record<string, unknown>;
/** True when the message certainly passes; false when protovalidate must judge it. */
type Check = (message: Fields) => boolean;

const valid: Check = () => true;

/** The rule sets this module judges (FieldRules as JSON); anything else is protovalidate's. */
const judged: Record<string, readonly string[]> = {
  string: ["maxLen", "minLen", "pattern", "uuid"],
  repeated: ["minItems", "maxItems"],
  int64: ["gte"],
  enum: ["definedOnly"],
};

/** null: protovalidate's alone (a rule outside the set, or a recursive type with rules). */
function compileMessage(
  desc: DescMessage,
  matcher: RegexMatcher,
  compiling: Set<DescMessage>,
): Check | null {
  if (!hasRules(desc, new Set())) return valid;
  // proto3 only: elsewhere an unset field can read as its default (protobuf-es puts defaults
  // on the prototype), which the presence tests below would take for a set value.
  if (desc.file.edition !== Edition.EDITION_PROTO3) return null;
  if (compiling.has(desc) || hasOption(desc, messageRules)) return null;
  if (desc.oneofs.some((o) => hasOption(o, oneofRules))) return null;
  compiling.add(desc);
  try {
    const fields: Check[] = [];
    for (const field of desc.fields) {
      const check = compileField(field, matcher, compiling);
      if (check === null) return null;
      if (check !== valid) fields.push(check);
    }
    if (fields.length === 0) return valid;
    return (message) => {
      for (let i = 0; i < fields.length; i++) if (!fields[i]!(message)) return false;
      return true;
    };
  } finally {
    compiling.delete(desc);
  }
}

/** Whether the message or any message it holds has a rule. */
function hasRules(desc: DescMessage, seen: Set<DescMessage>): boolean {
  if (seen.has(desc)) return false;
  seen.add(desc);
  if (hasOption(desc, messageRules) || desc.oneofs.some((o) => hasOption(o, oneofRules))) {
    return true;
  }
  return desc.fields.some(
    (f) => hasOption(f, fieldRules) || (f.message !== undefined && hasRules(f.message, seen)),
  );
}

function compileField(
  field: DescField,
  matcher: RegexMatcher,
  compiling: Set<DescMessage>,
): Check | null {
  const nested =
    field.message === undefined ? valid : compileMessage(field.message, matcher, compiling);
  if (nested === null) return null;
  const ruled = hasOption(field, fieldRules);
  if (!ruled && nested === valid) return valid;
  // Oneof members and maps: protovalidate's whenever they or what they hold have rules.
  if (field.oneof !== undefined || field.fieldKind === "map") return null;
  const options = ruled ? getOption(field, fieldRules) : undefined;
  // Extensions of the rules (predefined rules) are not read here.
  if (options !== undefined && hasUnknown(options)) return null;
  const rules = options === undefined ? {} : (toJson(FieldRulesSchema, options) as JsonObject);
  const { required = false, ignore = "IGNORE_UNSPECIFIED", ...kinds } = rules;
  // Neither rules nor required apply (protovalidate: required && ignore !== ALWAYS).
  if (ignore === "IGNORE_ALWAYS") return valid;
  if (ignore !== "IGNORE_UNSPECIFIED" && ignore !== "IGNORE_IF_ZERO_VALUE") return null;
  const kindNames = Object.keys(kinds);
  if (kindNames.length > 1) return null;
  const kind = kindNames[0];
  const spec = kind === undefined ? {} : (kinds[kind] as JsonObject);
  if (kind !== undefined && Object.keys(spec).some((k) => !judged[kind]?.includes(k))) {
    return null;
  }
  const name = field.localName;
  const isSet = setTest(field);
  if (isSet === null) return null;
  // Whether the rules apply to the value (protovalidate's ignore conditions).
  const applies =
    ignore === "IGNORE_IF_ZERO_VALUE" ||
    field.fieldKind === "message" ||
    (field.fieldKind !== "list" && field.presence !== FeatureSet_FieldPresence.IMPLICIT)
      ? isSet
      : () => true;
  const value = compileValue(field, kind, spec, nested, matcher);
  if (value === null) return null;
  return (message) => {
    const v = message[name];
    if (required === true && !isSet(v)) return false;
    return !applies(v) || value(v);
  };
}

/** Whether a message or any message in it carries unknown fields (extensions). */
function hasUnknown(value: unknown): boolean {
  if (typeof value !== "object" || value === null || value instanceof Uint8Array) return false;
  if (Array.isArray(value)) return value.some(hasUnknown);
  const unknown = (value as { $unknown?: unknown[] }).$unknown;
  if (unknown !== undefined && unknown.length > 0) return true;
  return Object.entries(value).some(([key, v]) => key !== "$unknown" && hasUnknown(v));
}

/** Whether a field's value counts as set, as protobuf-es's isFieldSet says. */
function setTest(field: DescField): ((v: unknown) => boolean) | null {
  switch (field.fieldKind) {
    case "list":
      return (v) => Array.isArray(v) && v.length > 0;
    case "message":
      return (v) => v !== undefined;
    case "enum":
      return field.presence === FeatureSet_FieldPresence.IMPLICIT
        ? (v) => v !== 0
        : (v) => v !== undefined;
    case "scalar":
      if (field.presence !== FeatureSet_FieldPresence.IMPLICIT) return (v) => v !== undefined;
      return (v) =>
        !(
          v === "" ||
          v === 0 ||
          v === 0n ||
          v === false ||
          (v instanceof Uint8Array && v.length === 0)
        );
    default:
      return null;
  }
}

/** The check of a field's value once its rules apply; null when not judged here. */
function compileValue(
  field: DescField,
  kind: string | undefined,
  spec: JsonObject,
  nested: Check,
  matcher: RegexMatcher,
): ((v: unknown) => boolean) | null {
  switch (field.fieldKind) {
    case "message":
      if (kind !== undefined) return null;
      return (v) => v === undefined || nested(v as Fields);
    case "list": {
      if (kind !== undefined && kind !== "repeated") return null;
      const min = bound(spec.minItems, 0);
      const max = bound(spec.maxItems, Number.POSITIVE_INFINITY);
      if (min === null || max === null) return null;
      const item = field.listKind === "message" ? nested : valid;
      return (v) => {
        const list = v as unknown[];
        if (list.length < min || list.length > max) return false;
        if (item !== valid) for (const x of list) if (!item(x as Fields)) return false;
        return true;
      };
    }
    case "enum": {
      if (kind === undefined) return () => true;
      if (kind !== "enum" || spec.definedOnly !== true) return null;
      const numbers = new Set(field.enum.values.map((e) => e.number));
      return (v) => numbers.has(v as number);
    }
    case "scalar":
      if (kind === undefined) return () => true;
      if (kind === "string") return stringCheck(spec, matcher);
      if (kind === "int64") {
        const gte = spec.gte === undefined ? undefined : BigInt(spec.gte as string);
        return (v) => typeof v === "bigint" && (gte === undefined || v >= gte);
      }
      return null;
    default:
      return null;
  }
}

const uuid = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

function stringCheck(spec: JsonObject, matcher: RegexMatcher): ((v: unknown) => boolean) | null {
  const max = bound(spec.maxLen, Number.POSITIVE_INFINITY);
  const min = bound(spec.minLen, 0);
  if (max === null || min === null) return null;
  const pattern = typeof spec.pattern === "string" ? spec.pattern : undefined;
  const isUuid = spec.uuid === true;
  return (v) => {
    if (typeof v !== "string") return false;
    // Lengths count code points; a UTF-16 length within the bounds settles it without a count.
    if (v.length > max) return false;
    if (v.length < 2 * min && codePoints(v) < min) return false;
    if (isUuid && !uuid.test(v)) return false;
    if (pattern !== undefined) {
      try {
        if (!matcher(pattern, v)) return false;
      } catch {
        return false;
      }
    }
    return true;
  };
}

/** A bound from the rules (uint64 as JSON: a decimal string), `otherwise` when absent. */
function bound(value: unknown, otherwise: number): number | null {
  if (value === undefined) return otherwise;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : null;
}

function codePoints(s: string): number {
  let count = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
    count++;
  }
  return count;
}
