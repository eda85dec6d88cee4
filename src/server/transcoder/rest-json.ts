import {
  create,
  type DescMessage,
  fromJson,
  type JsonValue,
  type Message,
  mergeFromJson,
  type Registry,
  toJson,
} from "@bufbuild/protobuf";
import { isFieldError } from "@bufbuild/protobuf/reflect";
import { setRequestFieldsJson } from "../preset-encoding.js";
import { bodyJsonError, invalidField, malformedJson } from "./errors.js";
import { type FieldTarget, fieldPathKey, nestJson } from "./fields.js";
import { parsedMemberCount, topLevelValueSpans, writtenMemberCount } from "./json-span.js";
import { variableValue } from "./path-template.js";
import type { Route } from "./routes.js";

const utf8 = new TextDecoder("utf-8", { fatal: true });

function parseJson(body: Uint8Array): JsonValue {
  try {
    return JSON.parse(utf8.decode(body)) as JsonValue;
  } catch {
    throw malformedJson("the request body is not valid JSON");
  }
}

/** Sets one field from a path variable or query parameter; path values overwrite the body's. */
function setField(
  input: DescMessage,
  message: Message,
  target: FieldTarget,
  value: JsonValue,
  what: string,
): void {
  try {
    mergeFromJson(input, message, nestJson(target.fields, value));
  } catch (err) {
    const cause = err instanceof Error ? err.cause : undefined;
    const problem = isFieldError(cause) ? cause.message : err instanceof Error ? err.message : "";
    throw invalidField("INVALID_FIELD", what, `invalid value for "${what}": ${problem}`);
  }
}

/** Whether the path or the body binds this field path or one of its parents. */
function isBound(route: Route, target: FieldTarget): boolean {
  for (let i = 1; i <= target.fields.length; i++) {
    if (route.boundKeys.has(fieldPathKey(target.fields.slice(0, i)))) return true;
  }
  return false;
}

function applyQuery(route: Route, message: Message, query: string): void {
  const values = new Map<string, string[]>();
  for (const [name, value] of new URLSearchParams(query)) {
    if (name === "") continue;
    const list = values.get(name);
    if (list === undefined) values.set(name, [value]);
    else list.push(value);
  }
  for (const [name, texts] of values) {
    if (route.queryFields === undefined) {
      throw invalidField(
        "UNKNOWN_QUERY_PARAMETER",
        name,
        `unknown query parameter "${name}": the request body carries the whole request`,
      );
    }
    const resolved = route.queryFields.resolve(route.input, name);
    if (resolved.kind === "unknown") {
      throw invalidField("UNKNOWN_QUERY_PARAMETER", name, `unknown query parameter "${name}"`);
    }
    if (resolved.kind === "not_scalar") {
      throw invalidField(
        "INVALID_FIELD",
        name,
        `query parameter "${name}" does not name a scalar field`,
      );
    }
    const target = resolved.target;
    if (isBound(route, target)) {
      throw invalidField(
        "INVALID_FIELD",
        name,
        `query parameter "${name}" sets a field that the path or body sets`,
      );
    }
    if (!target.repeated && texts.length > 1) {
      throw invalidField(
        "INVALID_FIELD",
        name,
        `query parameter "${name}" is given more than once`,
      );
    }
    const value = target.repeated ? texts.map(target.toJson) : target.toJson(texts[0] ?? "");
    setField(route.input, message, target, value, name);
  }
}

/**
 * Keeps the JSON text of the body's Struct fields beside the message, for a handler that
 * passes it on as it is (src/server/preset-encoding.ts): only an object given under one name.
 */
function keepStructJson(route: Route, body: Uint8Array, message: Message): void {
  const names = new Set<string>();
  for (const f of route.structFields) names.add(f.name).add(f.jsonName);
  const spans = topLevelValueSpans(body, names);
  if (spans.size === 0) return;
  const bytes = Buffer.isBuffer(body)
    ? body
    : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const kept = new Map<string, Buffer>();
  for (const f of route.structFields) {
    const byName = spans.get(f.name);
    const byJsonName = f.jsonName === f.name ? undefined : spans.get(f.jsonName);
    const span = byName ?? byJsonName;
    if (span === undefined || (byName !== undefined && byJsonName !== undefined)) continue;
    if (bytes[span[0]] !== 0x7b) continue; // null, or not an object: nothing to keep
    const value = (message as unknown as Record<string, unknown>)[f.localName];
    if (value === undefined) continue;
    // A key given twice in one object: JSON.parse kept the last, a receiver may keep the
    // first. The handler decides on the parsed value (the gateway's policy on its data
    // classes), so such text is not passed on: the value is written anew instead.
    if (writtenMemberCount(bytes, span[0], span[1]) !== parsedMemberCount(value)) continue;
    kept.set(f.name, bytes.subarray(span[0], span[1]));
  }
  if (kept.size > 0) setRequestFieldsJson(message, kept);
}

/**
 * The request message of a REST call: the body (per HttpRule.body), then the
 * path variables (they win), then the query parameters.
 */
export function buildRequestMessage(
  route: Route,
  body: Uint8Array | undefined,
  segments: readonly string[],
  query: string,
  registry: Registry,
): Message {
  let message: Message;
  if (body === undefined || route.body.kind === "none") {
    message = create(route.input);
  } else {
    const parsed = parseJson(body);
    if (
      route.body.kind === "all" &&
      (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
    ) {
      throw malformedJson("the request body must be a JSON object");
    }
    const json = route.body.kind === "all" ? parsed : { [route.body.field.jsonName]: parsed };
    try {
      message = fromJson(route.input, json, { registry });
    } catch (err) {
      throw bodyJsonError(err, route.input, json);
    }
    if (route.structFields.length > 0) keepStructJson(route, body, message);
  }
  for (const binding of route.pathBindings) {
    const text = variableValue(binding.variable, segments);
    if (text === undefined) {
      throw invalidField(
        "INVALID_FIELD",
        binding.name,
        `path variable "${binding.name}" is badly percent-encoded`,
      );
    }
    setField(route.input, message, binding.target, binding.target.toJson(text), binding.name);
  }
  if (query !== "") applyQuery(route, message, query);
  return message;
}

/**
 * The REST response body for a handler's response message: proto JSON with
 * proto field names and default values emitted, or only the field named by
 * HttpRule.response_body.
 */
export function responseJson(route: Route, message: Message, registry: Registry): string {
  const json = toJson(route.output, message, {
    useProtoFieldName: true,
    alwaysEmitImplicit: true,
    registry,
  });
  const field = route.responseField;
  if (field === undefined) return JSON.stringify(json);
  const value = (json as Record<string, JsonValue | undefined>)[field.name];
  return JSON.stringify(value ?? (field.fieldKind === "message" ? {} : null));
}
