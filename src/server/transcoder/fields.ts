import { type DescField, type DescMessage, type JsonValue, ScalarType } from "@bufbuild/protobuf";

/** Converts the text of a path variable or query parameter to the field's proto JSON value. */
export type TextToJson = (text: string) => JsonValue;

/** A field reached from the request message by a path of fields, root first. */
export interface FieldTarget {
  fields: readonly DescField[];
  /** The leaf's converter. */
  toJson: TextToJson;
  /** The leaf is repeated: every value of the parameter goes in. */
  repeated: boolean;
}

const identity: TextToJson = (text) => text;
const boolText: TextToJson = (text) => {
  if (text === "true" || text === "1") return true;
  if (text === "false" || text === "0") return false;
  return text; // fromJson rejects it, naming the field
};
const integerPattern = /^-?[0-9]+$/;
/** Enum values by name or by number. */
const enumText: TextToJson = (text) => (integerPattern.test(text) ? Number(text) : text);

/** Well-known message types whose JSON form is a single scalar. */
const scalarLikeMessages: ReadonlyMap<string, TextToJson> = new Map([
  ["google.protobuf.BoolValue", boolText],
  ...[
    "DoubleValue",
    "FloatValue",
    "Int64Value",
    "UInt64Value",
    "Int32Value",
    "UInt32Value",
    "StringValue",
    "BytesValue",
    "Timestamp",
    "Duration",
    "FieldMask",
  ].map((name): [string, TextToJson] => [`google.protobuf.${name}`, identity]),
]);

/**
 * The converter for a field that a path variable or query parameter may set:
 * scalars, enums, bytes and the scalar-like well-known types (wrappers,
 * Timestamp, Duration, FieldMask), singular or repeated. Undefined for others.
 */
export function textConverter(field: DescField): TextToJson | undefined {
  switch (field.fieldKind) {
    case "scalar":
      return field.scalar === ScalarType.BOOL ? boolText : identity;
    case "enum":
      return enumText;
    case "message":
      return scalarLikeMessages.get(field.message.typeName);
    case "list":
      if (field.listKind === "scalar")
        return field.scalar === ScalarType.BOOL ? boolText : identity;
      if (field.listKind === "enum") return enumText;
      return scalarLikeMessages.get(field.message.typeName);
    case "map":
      return undefined;
  }
}

/** A message field that field paths may descend into. */
function nestedMessage(field: DescField): DescMessage | undefined {
  if (field.fieldKind !== "message") return undefined;
  return scalarLikeMessages.has(field.message.typeName) ? undefined : field.message;
}

export type Resolution =
  | { kind: "ok"; target: FieldTarget }
  | { kind: "unknown" }
  | { kind: "not_scalar" };

/**
 * Field lookups for a request message and every message reachable from it,
 * by JSON name first and then by proto name. Built once per route table.
 */
export class FieldIndex {
  private readonly byMessage = new Map<DescMessage, Map<string, DescField>>();
  private readonly converters = new Map<DescField, TextToJson | undefined>();

  private fieldsOf(message: DescMessage): Map<string, DescField> {
    let names = this.byMessage.get(message);
    if (names !== undefined) return names;
    names = new Map();
    this.byMessage.set(message, names);
    for (const field of message.fields) names.set(field.jsonName, field);
    for (const field of message.fields) if (!names.has(field.name)) names.set(field.name, field);
    for (const field of message.fields) {
      this.converters.set(field, textConverter(field));
      const nested = nestedMessage(field);
      if (nested !== undefined) this.fieldsOf(nested);
    }
    return names;
  }

  /** Indexes a request message and what it reaches (at route table build time). */
  add(message: DescMessage): void {
    this.fieldsOf(message);
  }

  /** Resolves a dotted name ("author.name", "pageSize") against an indexed message. */
  resolve(message: DescMessage, dottedName: string): Resolution {
    const fields: DescField[] = [];
    let current: DescMessage | undefined = message;
    for (const part of dottedName.split(".")) {
      const names = current && this.byMessage.get(current);
      const field = names?.get(part);
      if (field === undefined) return { kind: current ? "unknown" : "not_scalar" };
      fields.push(field);
      current = nestedMessage(field);
    }
    const leaf = fields.at(-1);
    const toJson = leaf && this.converters.get(leaf);
    if (leaf === undefined || toJson === undefined) return { kind: "not_scalar" };
    return { kind: "ok", target: { fields, toJson, repeated: leaf.fieldKind === "list" } };
  }
}

/** Wraps a leaf value in the objects of its field path: {book: {name: value}}. */
export function nestJson(fields: readonly DescField[], value: JsonValue): JsonValue {
  let json = value;
  for (let i = fields.length - 1; i >= 0; i--) json = { [fields[i]?.jsonName ?? ""]: json };
  return json;
}

/** A key for a field path, to compare paths by identity: "1.5.2". */
export function fieldPathKey(fields: readonly DescField[]): string {
  return fields.map((f) => f.number).join(".");
}
