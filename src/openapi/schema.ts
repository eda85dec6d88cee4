import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  ScalarType,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { isRequired, withRules } from "./constraints.js";

/**
 * JSON Schemas (draft 2020-12, as OpenAPI 3.1 uses them) of protobuf messages in the
 * proto JSON form the REST transcoder reads and writes (src/server/transcoder/rest-json.ts):
 * proto field names; 64-bit integers as strings; enums by name; bytes as base64; the
 * well-known types in their own JSON forms.
 *
 * Two views of each message: what the server answers ("output": every field with implicit
 * presence is always there, so it is required; nothing else is allowed) and what it reads
 * ("input": the protovalidate rules, `required` among them; the lowerCamel JSON names are
 * accepted too).
 */
export type Direction = "input" | "output";

/** Descriptions of proto elements (their leading comments), by descriptor. */
export type Describe = (desc: DescMessage | DescField | DescEnum) => string | undefined;

const int64Pattern = "^-?[0-9]+$";
const uint64Pattern = "^[0-9]+$";

function scalarSchema(scalar: ScalarType): JsonObject {
  switch (scalar) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", format: "byte", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
      return { type: "number", format: "double" };
    case ScalarType.FLOAT:
      return { type: "number", format: "float" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", format: "int64", minimum: 0, maximum: 4294967295 };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return { type: "string", format: "int64", pattern: int64Pattern };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return { type: "string", format: "uint64", pattern: uint64Pattern };
  }
}

const wrapperScalars: ReadonlyMap<string, ScalarType> = new Map([
  ["google.protobuf.DoubleValue", ScalarType.DOUBLE],
  ["google.protobuf.FloatValue", ScalarType.FLOAT],
  ["google.protobuf.Int64Value", ScalarType.INT64],
  ["google.protobuf.UInt64Value", ScalarType.UINT64],
  ["google.protobuf.Int32Value", ScalarType.INT32],
  ["google.protobuf.UInt32Value", ScalarType.UINT32],
  ["google.protobuf.BoolValue", ScalarType.BOOL],
  ["google.protobuf.StringValue", ScalarType.STRING],
  ["google.protobuf.BytesValue", ScalarType.BYTES],
]);

/** The JSON forms of the well-known types that are not plain objects of their fields. */
function wellKnownSchema(typeName: string): JsonObject | undefined {
  switch (typeName) {
    case "google.protobuf.Timestamp":
      return { type: "string", format: "date-time", description: "RFC 3339, UTC (`Z`)." };
    case "google.protobuf.Duration":
      return {
        type: "string",
        pattern: "^-?[0-9]+(\\.[0-9]{1,9})?s$",
        description: 'Seconds with up to 9 fractional digits and the suffix "s", e.g. "1.5s".',
      };
    case "google.protobuf.FieldMask":
      return { type: "string", description: "Comma-separated lowerCamel field paths." };
    case "google.protobuf.Struct":
      return { type: "object", additionalProperties: true };
    case "google.protobuf.Value":
      return { description: "Any JSON value." };
    case "google.protobuf.ListValue":
      return { type: "array", items: {} };
    case "google.protobuf.Empty":
      return { type: "object", additionalProperties: false };
    case "google.protobuf.Any":
      return {
        type: "object",
        required: ["@type"],
        properties: { "@type": { type: "string" } },
        additionalProperties: true,
      };
  }
  const wrapped = wrapperScalars.get(typeName);
  return wrapped === undefined ? undefined : scalarSchema(wrapped);
}

/** The name of a message's schema under components/schemas for one direction. */
export type SchemaName = (message: DescMessage, direction: Direction) => string;

/**
 * Builds the component schemas of the messages that the document refers to, each once per
 * direction, following message fields to every message they reach.
 */
export class SchemaSet {
  private readonly schemas = new Map<string, JsonObject>();

  constructor(
    private readonly describe: Describe,
    private readonly nameOf: SchemaName,
  ) {}

  /** A schema for a message: a `$ref` to its component, or the well-known type's JSON form. */
  messageRef(message: DescMessage, direction: Direction): JsonObject {
    const wkt = wellKnownSchema(message.typeName);
    if (wkt !== undefined) return wkt;
    const name = this.nameOf(message, direction);
    if (!this.schemas.has(name)) {
      this.schemas.set(name, {}); // placeholder: stops recursion on cyclic messages
      this.schemas.set(name, this.messageSchema(message, direction));
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  /** The schema of one field's value (for a body or response_body field too). */
  fieldSchema(field: DescField, direction: Direction): JsonObject {
    const value = this.valueSchema(field, direction);
    // Requests also say the protovalidate rules the server enforces on them.
    const schema = direction === "input" ? withRules(field, value) : value;
    const description = this.describe(field);
    if (description === undefined) return schema;
    // Siblings of $ref are allowed in OpenAPI 3.1 (JSON Schema 2020-12).
    return { ...schema, description };
  }

  /** The component schemas, sorted by name. */
  components(): JsonObject {
    const out: JsonObject = {};
    for (const name of [...this.schemas.keys()].sort()) out[name] = this.schemas.get(name) ?? {};
    return out;
  }

  private enumSchema(desc: DescEnum): JsonObject {
    const schema: JsonObject = { type: "string", enum: desc.values.map((v) => v.name) };
    const description = this.describe(desc);
    return description === undefined ? schema : { ...schema, description };
  }

  private singular(
    kind: "scalar" | "enum" | "message",
    field: { scalar?: ScalarType; enum?: DescEnum; message?: DescMessage },
    direction: Direction,
  ): JsonObject {
    if (kind === "enum" && field.enum) {
      if (field.enum.typeName === "google.protobuf.NullValue") return { type: "null" };
      return this.enumSchema(field.enum);
    }
    if (kind === "message" && field.message) return this.messageRef(field.message, direction);
    return scalarSchema(field.scalar ?? ScalarType.STRING);
  }

  private valueSchema(field: DescField, direction: Direction): JsonObject {
    switch (field.fieldKind) {
      case "scalar":
        return scalarSchema(field.scalar);
      case "enum":
        return this.singular("enum", { enum: field.enum }, direction);
      case "message":
        return this.messageRef(field.message, direction);
      case "list": {
        const items =
          field.listKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.listKind === "enum"
              ? this.singular("enum", { enum: field.enum }, direction)
              : this.messageRef(field.message, direction);
        return { type: "array", items };
      }
      case "map": {
        const values =
          field.mapKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.mapKind === "enum"
              ? this.singular("enum", { enum: field.enum }, direction)
              : this.messageRef(field.message, direction);
        return { type: "object", additionalProperties: values };
      }
    }
  }

  private messageSchema(message: DescMessage, direction: Direction): JsonObject {
    const properties: JsonObject = {};
    const required: JsonValue[] = [];
    for (const field of message.fields) {
      properties[field.name] = this.fieldSchema(field, direction);
      if (direction === "output" ? alwaysAnswered(field) : isRequired(field)) {
        required.push(field.name);
      }
    }
    const schema: JsonObject = { type: "object", properties };
    const description = this.describe(message);
    if (description !== undefined) schema.description = description;
    if (required.length > 0) schema.required = required;
    const oneofs = message.oneofs.map((o) => o.fields.map((f) => f.name).join(", "));
    if (oneofs.length > 0) {
      const note = oneofs.map((names) => `at most one of ${names}`).join("; ");
      schema.description = schema.description ? `${schema.description}\n\nOneof: ${note}.` : note;
    }
    if (direction === "output") schema.additionalProperties = false;
    return schema;
  }
}

/**
 * Whether the transcoder's answers always carry the field: with `alwaysEmitImplicit`,
 * fields with implicit presence (not `optional`, not in a oneof, not a message) and every
 * repeated or map field.
 */
function alwaysAnswered(field: DescField): boolean {
  if (field.fieldKind === "list" || field.fieldKind === "map") return true;
  if (field.fieldKind === "message" || field.oneof !== undefined) return false;
  return field.presence === FeatureSet_FieldPresence.IMPLICIT;
}
