import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonValue,
  ScalarType,
} from "@bufbuild/protobuf";

/**
 * Where a REST request body does not have the shape its proto message asks for, said the way
 * a client wrote it: the path of the key (`roles`, `roles.values[0]`), what was expected and
 * what came. protobuf-es's own messages name the proto type (`cannot decode message
 * traitgate.identity.v1.RoleList from JSON: Array(1)`) or only the innermost field; this walk
 * runs after fromJson refused a body, to answer a 400 that names the field.
 */
export interface ShapeMismatch {
  /** The key's path in the body, e.g. `roles.values[0]`. */
  path: string;
  /** What the field takes, e.g. `an object {"values": [...]}`. */
  expected: string;
  /** What came, e.g. `an array`. */
  got: string;
}

/** The first place `json` does not fit `schema`, or undefined (unknown keys are not looked at). */
export function findShapeMismatch(schema: DescMessage, json: JsonValue): ShapeMismatch | undefined {
  return messageMismatch(schema, json, "");
}

const kindOf = (value: JsonValue): string => {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  if (typeof value === "string") return "a string";
  if (typeof value === "number") return "a number";
  return "true or false";
};

const join = (path: string, key: string) => (path === "" ? key : `${path}.${key}`);

/** Well-known types with a JSON form of their own: what they take. */
const wellKnown: Record<string, (v: JsonValue) => string | undefined> = {
  "google.protobuf.Timestamp": (v) =>
    typeof v === "string" ? undefined : 'a time string, e.g. "2025-03-01T00:00:00Z"',
  "google.protobuf.Duration": (v) =>
    typeof v === "string" ? undefined : 'a duration string, e.g. "1.5s"',
  "google.protobuf.FieldMask": (v) =>
    typeof v === "string" ? undefined : 'a string of comma-separated field paths, e.g. "a,b.c"',
  "google.protobuf.Struct": (v) =>
    v !== null && typeof v === "object" && !Array.isArray(v) ? undefined : "an object",
  "google.protobuf.ListValue": (v) => (Array.isArray(v) ? undefined : "an array"),
  "google.protobuf.Value": () => undefined,
  "google.protobuf.Any": (v) =>
    v !== null && typeof v === "object" && !Array.isArray(v) ? undefined : 'an object with "@type"',
};

const wrapperScalar: Record<string, ScalarType> = {
  "google.protobuf.DoubleValue": ScalarType.DOUBLE,
  "google.protobuf.FloatValue": ScalarType.FLOAT,
  "google.protobuf.Int64Value": ScalarType.INT64,
  "google.protobuf.UInt64Value": ScalarType.UINT64,
  "google.protobuf.Int32Value": ScalarType.INT32,
  "google.protobuf.UInt32Value": ScalarType.UINT32,
  "google.protobuf.BoolValue": ScalarType.BOOL,
  "google.protobuf.StringValue": ScalarType.STRING,
  "google.protobuf.BytesValue": ScalarType.BYTES,
};

function messageMismatch(
  schema: DescMessage,
  value: JsonValue,
  path: string,
): ShapeMismatch | undefined {
  const special = wellKnown[schema.typeName];
  if (special !== undefined) {
    const expected = special(value);
    return expected === undefined ? undefined : { path, expected, got: kindOf(value) };
  }
  const wrapped = wrapperScalar[schema.typeName];
  if (wrapped !== undefined) return scalarMismatch(wrapped, value, path);
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { path, expected: objectOf(schema), got: kindOf(value) };
  }
  for (const [key, item] of Object.entries(value)) {
    const field = schema.fields.find((f) => f.jsonName === key || f.name === key);
    // Unknown keys are reported by the caller; null is a field's default.
    if (field === undefined || item === null) continue;
    const found = fieldMismatch(field, item, join(path, key));
    if (found !== undefined) return found;
  }
  return undefined;
}

function fieldMismatch(
  field: DescField,
  value: JsonValue,
  path: string,
): ShapeMismatch | undefined {
  switch (field.fieldKind) {
    case "scalar":
      return scalarMismatch(field.scalar, value, path);
    case "enum":
      return enumMismatch(
        field.enum.values.map((v) => v.name),
        value,
        path,
      );
    case "message":
      return messageMismatch(field.message, value, path);
    case "list": {
      if (!Array.isArray(value)) {
        return { path, expected: `an array of ${itemKind(field)}`, got: kindOf(value) };
      }
      const element = elementOf(field);
      for (const [i, item] of value.entries()) {
        const found = elementMismatch(element, item, `${path}[${i}]`);
        if (found !== undefined) return found;
      }
      return undefined;
    }
    case "map": {
      if (value === null || typeof value !== "object" || Array.isArray(value)) {
        return { path, expected: "an object (a map)", got: kindOf(value) };
      }
      const element = elementOf(field);
      for (const [key, item] of Object.entries(value)) {
        const found = elementMismatch(element, item, `${path}.${key}`);
        if (found !== undefined) return found;
      }
      return undefined;
    }
  }
}

/** What one item of a list or one value of a map is. */
type Element =
  | { kind: "scalar"; scalar: ScalarType }
  | { kind: "enum"; names: string[] }
  | { kind: "message"; message: DescMessage };

function elementOf(field: DescField & { fieldKind: "list" | "map" }): Element {
  if (field.fieldKind === "list") {
    if (field.listKind === "scalar") return { kind: "scalar", scalar: field.scalar };
    if (field.listKind === "enum") return enumElement(field.enum);
    return { kind: "message", message: field.message };
  }
  if (field.mapKind === "scalar") return { kind: "scalar", scalar: field.scalar };
  if (field.mapKind === "enum") return enumElement(field.enum);
  return { kind: "message", message: field.message };
}

const enumElement = (e: DescEnum): Element => ({
  kind: "enum",
  names: e.values.map((v) => v.name),
});

function elementMismatch(element: Element, item: JsonValue, at: string) {
  if (element.kind === "scalar") return scalarMismatch(element.scalar, item, at);
  if (element.kind === "enum") return enumMismatch(element.names, item, at);
  return messageMismatch(element.message, item, at);
}

function itemKind(field: DescField & { fieldKind: "list" }): string {
  if (field.listKind === "scalar") return `${scalarNoun(field.scalar).replace(/^an? /, "")}s`;
  if (field.listKind === "enum") return "enum names";
  return `objects ${objectOf(field.message).replace(/^an object /, "")}`;
}

const isInteger = (t: ScalarType) =>
  t !== ScalarType.DOUBLE &&
  t !== ScalarType.FLOAT &&
  t !== ScalarType.BOOL &&
  t !== ScalarType.STRING &&
  t !== ScalarType.BYTES;

function scalarNoun(t: ScalarType): string {
  if (t === ScalarType.STRING) return "a string";
  if (t === ScalarType.BOOL) return "a boolean";
  if (t === ScalarType.BYTES) return "a base64 string";
  if (isInteger(t)) return "an integer";
  return "a number";
}

function scalarMismatch(t: ScalarType, value: JsonValue, path: string): ShapeMismatch | undefined {
  const fits =
    t === ScalarType.STRING || t === ScalarType.BYTES
      ? typeof value === "string"
      : t === ScalarType.BOOL
        ? typeof value === "boolean"
        : typeof value === "number" || typeof value === "string";
  return fits || value === null ? undefined : { path, expected: scalarNoun(t), got: kindOf(value) };
}

function enumMismatch(
  names: readonly string[],
  value: JsonValue,
  path: string,
): ShapeMismatch | undefined {
  if (typeof value === "number" || value === null) return undefined;
  if (typeof value === "string" && names.includes(value)) return undefined;
  const got = typeof value === "string" ? `"${value}"` : kindOf(value);
  return { path, expected: `one of ${names.join(", ")}`, got };
}

/** `an object {"values": [...]}`: the message's first fields, as a client writes them. */
function objectOf(schema: DescMessage): string {
  const shown = schema.fields.slice(0, 4).map((f) => `"${f.name}": ${placeholder(f)}`);
  if (schema.fields.length > shown.length) shown.push("…");
  return `an object {${shown.join(", ")}}`;
}

const stringLike = new Set([
  "google.protobuf.Timestamp",
  "google.protobuf.Duration",
  "google.protobuf.FieldMask",
  "google.protobuf.StringValue",
]);

function placeholder(field: DescField): string {
  if (field.fieldKind === "list") return "[...]";
  if (field.fieldKind === "message" && stringLike.has(field.message.typeName)) return '"..."';
  if (field.fieldKind === "map" || field.fieldKind === "message") return "{...}";
  if (field.fieldKind === "enum") return '"..."';
  if (field.scalar === ScalarType.STRING || field.scalar === ScalarType.BYTES) return '"..."';
  if (field.scalar === ScalarType.BOOL) return "true";
  return "0";
}
