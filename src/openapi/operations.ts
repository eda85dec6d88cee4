import type { DescField, DescMessage, DescMethod, JsonObject } from "@bufbuild/protobuf";
import type { HttpRule } from "../../gen/google/api/http_pb.js";
import type { AuthRule } from "../server/interceptors.js";
import { textConverter } from "../server/transcoder/fields.js";
import { type PathTemplate, parsePathTemplate } from "../server/transcoder/path-template.js";
import { methodAndPath } from "../server/transcoder/routes.js";
import { isRequired } from "./constraints.js";
import type { SchemaSet } from "./schema.js";

/** One HTTP binding of one method, as the document describes it. */
export interface Binding {
  method: DescMethod;
  rule: HttpRule;
  httpMethod: string;
  template: PathTemplate;
  /** "/a/{b}:verb": the template with each variable's pattern dropped. */
  path: string;
  /** Index among the method's bindings (0: the main one). */
  index: number;
}

/** The bindings of a method's `google.api.http` rules, additional bindings included. */
export function bindingsOf(method: DescMethod, rules: readonly HttpRule[]): Binding[] {
  const out: Binding[] = [];
  rules.forEach((rule, index) => {
    const mp = methodAndPath(rule);
    if (mp === undefined) return;
    const template = parsePathTemplate(mp.path);
    const path = mp.path.replace(/\{([^}=]+)(=[^}]*)?\}/g, "{$1}");
    out.push({ method, rule, httpMethod: mp.httpMethod, template, path, index });
  });
  return out;
}

function fieldByName(message: DescMessage, name: string): DescField | undefined {
  return message.fields.find((f) => f.name === name || f.jsonName === name);
}

/** The leaf field of a dotted field path ("book.name"), descending through message fields. */
function leafOf(message: DescMessage, dotted: string): DescField | undefined {
  let current: DescMessage | undefined = message;
  let field: DescField | undefined;
  for (const part of dotted.split(".")) {
    field = current && fieldByName(current, part);
    if (field === undefined) return undefined;
    current = field.fieldKind === "message" ? field.message : undefined;
  }
  return field;
}

const scalarLikeMessage = (field: DescField): boolean =>
  field.fieldKind === "message" && textConverter(field) !== undefined;

/**
 * The query parameters of a binding: every field the path and body leave unset that a
 * query parameter can set (scalars, enums, bytes, scalar-like well-known types, repeated
 * ones too), named by their proto field paths; none when the body takes the whole request.
 */
function queryParameters(binding: Binding, schemas: SchemaSet): JsonObject[] {
  const body = binding.rule.body;
  if (body === "*") return [];
  const bound = new Set(binding.template.variables.map((v) => v.fieldPath.join(".")));
  if (body !== "") bound.add(body);
  const params: JsonObject[] = [];
  const walk = (message: DescMessage, prefix: string, seen: ReadonlySet<DescMessage>) => {
    for (const field of message.fields) {
      const name = prefix + field.name;
      if (bound.has(name)) continue;
      if (field.fieldKind === "message" && !scalarLikeMessage(field)) {
        if (!seen.has(field.message))
          walk(field.message, `${name}.`, new Set([...seen, field.message]));
        continue;
      }
      if (textConverter(field) === undefined) continue;
      const param: JsonObject = {
        name,
        in: "query",
        required: false,
        schema: schemas.fieldSchema(field, "input"),
      };
      if (field.fieldKind === "list") {
        param.style = "form";
        param.explode = true;
      }
      params.push(param);
    }
  };
  walk(binding.method.input, "", new Set([binding.method.input]));
  return params;
}

/** The segment pattern a multi-segment variable binds, quoted for a description. */
function patternOf(template: string, name: string): string {
  const match = new RegExp(`\\{${name.replaceAll(".", "\\.")}=([^}]*)\\}`).exec(template);
  return `\`${match?.[1] ?? "*"}\``;
}

function pathParameters(binding: Binding, schemas: SchemaSet): JsonObject[] {
  return binding.template.variables.map((v) => {
    const name = v.fieldPath.join(".");
    const field = leafOf(binding.method.input, name);
    const param: JsonObject = {
      name,
      in: "path",
      required: true,
      schema: field ? schemas.fieldSchema(field, "input") : { type: "string" },
    };
    if (v.multiSegment) {
      param.description = `Matches ${patternOf(binding.template.source, name)}: several path segments, slashes kept.`;
    }
    return param;
  });
}

function requestBody(binding: Binding, schemas: SchemaSet): JsonObject | undefined {
  const body = binding.rule.body;
  if (body === "") return undefined;
  const input = binding.method.input;
  const field = body === "*" ? undefined : fieldByName(input, body);
  const schema = field ? schemas.fieldSchema(field, "input") : schemas.messageRef(input, "input");
  return {
    // A body field that protovalidate requires (RegisterPlugin's manifest) must be sent.
    required: field !== undefined && isRequired(field),
    description:
      "Proto JSON. Field names as shown (proto names) or their lowerCamel JSON names; " +
      "unknown fields are refused (400 UNKNOWN_FIELD).",
    content: { "application/json": { schema } },
  };
}

function responseSchema(binding: Binding, schemas: SchemaSet): JsonObject {
  const output = binding.method.output;
  const name = binding.rule.responseBody;
  const field = name === "" ? undefined : fieldByName(output, name);
  return field ? schemas.fieldSchema(field, "output") : schemas.messageRef(output, "output");
}

const errorResponse = { $ref: "#/components/responses/Error" };

/** `security` and a sentence on who may call, from the method's rule (src/server/interceptors.ts). */
function securityOf(rule: AuthRule | undefined): { security: JsonObject[]; who: string } {
  // Methods without a rule require authentication (fail closed), as the server does.
  const r = rule ?? { public: false, roles: [] };
  if (r.public && r.readsBearer) {
    // Optional: no credentials, or a bearer token the method reads.
    return { security: [{}, { bearerAuth: [] }], who: "The bearer token is optional." };
  }
  if (r.public) return { security: [], who: "No credentials needed." };
  const requirement: JsonObject = { bearerAuth: [...r.roles] };
  let who =
    r.roles.length === 0
      ? "Any authenticated caller (`Authorization: Bearer <token>`)."
      : `A bearer token of a caller with one of the roles ${r.roles.map((x) => `\`${x}\``).join(", ")}.`;
  if (r.apiKeyScopes !== undefined && r.apiKeyScopes.length > 0) {
    requirement.apiKeyAuth = [...r.apiKeyScopes];
    who += ` And an \`X-API-Key\` with the scope${r.apiKeyScopes.length > 1 ? "s" : ""} ${r.apiKeyScopes.map((s) => `\`${s}\``).join(", ")}.`;
  }
  if (r.allowMfaEnrollment) who += " An enrolment-only token (MFA_REQUIRED) is accepted.";
  return { security: [requirement], who };
}

/** The OpenAPI operation of one binding. */
export function operationOf(
  binding: Binding,
  rule: AuthRule | undefined,
  schemas: SchemaSet,
  describe: (method: DescMethod) => string | undefined,
): JsonObject {
  const method = binding.method;
  const service = method.parent;
  const { security, who } = securityOf(rule);
  const description = [describe(method), who].filter((s) => s !== undefined).join("\n\n");
  const responses: JsonObject = {
    "200": {
      description: "OK",
      headers: { "x-request-id": { $ref: "#/components/headers/RequestId" } },
      content: { "application/json": { schema: responseSchema(binding, schemas) } },
    },
    "400": errorResponse,
  };
  if (security.length > 0) {
    responses["401"] = errorResponse;
    responses["403"] = errorResponse;
  }
  responses.default = errorResponse;
  const operation: JsonObject = {
    operationId: `${service.name}_${method.name}${binding.index === 0 ? "" : `_${binding.index + 1}`}`,
    summary: `${method.name} (${service.typeName}/${method.name})`,
    description,
    tags: [service.name],
    "x-grpc-method": `${service.typeName}/${method.name}`,
  };
  const parameters = [...pathParameters(binding, schemas), ...queryParameters(binding, schemas)];
  if (parameters.length > 0) operation.parameters = parameters;
  const body = requestBody(binding, schemas);
  if (body !== undefined) operation.requestBody = body;
  operation.responses = responses;
  operation.security = security;
  return operation;
}
