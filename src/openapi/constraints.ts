import { type DescField, getOption, hasOption, type JsonObject } from "@bufbuild/protobuf";
import {
  type FieldRules,
  field as fieldRules,
  Ignore,
} from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";

/**
 * The protovalidate rules of a field (`(buf.validate.field)`, enforced by the server's
 * validate interceptor) that JSON Schema can say, for request schemas: string lengths,
 * patterns, uuid and email, `in`, integer bounds, list sizes and uniqueness. Rules it cannot
 * say (CEL, timestamps, maps) stay in the proto; the server still enforces them.
 */
export function rulesOf(field: DescField): FieldRules | undefined {
  return hasOption(field, fieldRules) ? getOption(field, fieldRules) : undefined;
}

/** Whether the field must be set (`required = true`). */
export const isRequired = (field: DescField): boolean => rulesOf(field)?.required === true;

type Bounds = {
  lessThan: { case: "lt" | "lte"; value: number | bigint } | { case: undefined | string };
  greaterThan: { case: "gt" | "gte"; value: number | bigint } | { case: undefined | string };
};

function bounds(rules: Bounds): JsonObject {
  const out: JsonObject = {};
  const lt = rules.lessThan;
  if (lt.case === "lt" && "value" in lt) out.exclusiveMaximum = Number(lt.value);
  if (lt.case === "lte" && "value" in lt) out.maximum = Number(lt.value);
  const gt = rules.greaterThan;
  if (gt.case === "gt" && "value" in gt) out.exclusiveMinimum = Number(gt.value);
  if (gt.case === "gte" && "value" in gt) out.minimum = Number(gt.value);
  return out;
}

/** JSON Schema keywords for one value's rules (a field's, or a list's items'). */
function valueKeywords(rules: FieldRules): JsonObject {
  const type = rules.type;
  switch (type.case) {
    case "string": {
      const s = type.value;
      const out: JsonObject = {};
      if (s.minLen > 0n) out.minLength = Number(s.minLen);
      if (s.maxLen > 0n) out.maxLength = Number(s.maxLen);
      if (s.pattern !== "") out.pattern = s.pattern;
      if (s.in.length > 0) out.enum = [...s.in];
      if (s.wellKnown.case === "uuid" && s.wellKnown.value) out.format = "uuid";
      if (s.wellKnown.case === "email" && s.wellKnown.value) out.format = "email";
      return out;
    }
    case "int32":
    case "uint32":
    case "sint32":
    case "fixed32":
    case "sfixed32":
    case "double":
    case "float":
      return bounds(type.value as Bounds);
    case "repeated": {
      const r = type.value;
      const out: JsonObject = {};
      if (r.minItems > 0n) out.minItems = Number(r.minItems);
      if (r.maxItems > 0n) out.maxItems = Number(r.maxItems);
      if (r.unique) out.uniqueItems = true;
      return out;
    }
    default:
      return {};
  }
}

/**
 * The field's schema with its rules added. A field whose rules apply only when it is set
 * (IGNORE_IF_ZERO_VALUE) may also be empty: `anyOf` the empty value and the rules.
 */
export function withRules(field: DescField, schema: JsonObject): JsonObject {
  const rules = rulesOf(field);
  if (rules === undefined) return schema;
  const own = valueKeywords(rules);
  const out: JsonObject = { ...schema };
  const items = rules.type.case === "repeated" ? rules.type.value.items : undefined;
  if (items !== undefined && typeof schema.items === "object" && schema.items !== null) {
    const itemKeywords = valueKeywords(items);
    if (Object.keys(itemKeywords).length > 0) {
      out.items = { ...(schema.items as JsonObject), ...itemKeywords };
    }
  }
  if (Object.keys(own).length === 0) return out;
  if (rules.ignore === Ignore.IF_ZERO_VALUE && field.fieldKind === "scalar") {
    const zero = schema.type === "string" ? "" : schema.type === "boolean" ? false : 0;
    return { ...out, anyOf: [{ const: zero }, own] };
  }
  return { ...out, ...own };
}
