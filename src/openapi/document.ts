import type {
  DescEnum,
  DescField,
  DescMessage,
  DescMethod,
  DescService,
  JsonObject,
} from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { errorDomain } from "../server/error-boundary.js";
import { codeName } from "../server/http-status.js";
import type { AuthRule } from "../server/interceptors.js";
import { httpRulesOf } from "../server/transcoder/routes.js";
import { bindingsOf, operationOf } from "./operations.js";
import { type Direction, SchemaSet } from "./schema.js";

/** Leading comments of proto elements; undefined where there are none. */
export interface Comments {
  of(desc: DescMessage | DescField | DescEnum | DescMethod | DescService): string | undefined;
}

export interface OpenApiInput {
  /** The services whose REST bindings the server serves. */
  services: readonly DescService[];
  /** How each method is protected, by "<package.Service>/<Method>". */
  authRules: ReadonlyMap<string, AuthRule>;
  comments: Comments;
  version: string;
  /**
   * Request bodies a method also takes besides JSON, by "<package.Service>/<Method>": media
   * type → OpenAPI media type object (the form-encoded OAuth token request).
   */
  otherRequestContent?: ReadonlyMap<string, JsonObject>;
}

/** Every message a set of messages reaches through its fields, the messages included. */
function reachable(roots: readonly DescMessage[]): Set<DescMessage> {
  const seen = new Set<DescMessage>();
  const visit = (m: DescMessage) => {
    if (seen.has(m)) return;
    seen.add(m);
    for (const f of m.fields) {
      if (f.fieldKind === "message") visit(f.message);
      else if (f.fieldKind === "list" && f.listKind === "message") visit(f.message);
      else if (f.fieldKind === "map" && f.mapKind === "message") visit(f.message);
    }
  };
  for (const r of roots) visit(r);
  return seen;
}

const errorInfoType = "type.googleapis.com/google.rpc.ErrorInfo";

/** The REST error body (src/server/transcoder/errors.ts) and its first detail. */
function errorSchemas(): JsonObject {
  const codes = Object.values(Code)
    .filter((c): c is Code => typeof c === "number")
    .map((c) => codeName(c));
  return {
    Error: {
      type: "object",
      description:
        "Every error answer. The first detail is a google.rpc.ErrorInfo with a stable `reason`: " +
        "branch on the reason, never on the message.",
      required: ["code", "message", "details"],
      properties: {
        code: { type: "string", enum: codes, description: "The gRPC code, in snake_case." },
        message: { type: "string", description: "For humans; may change." },
        details: {
          type: "array",
          minItems: 1,
          prefixItems: [{ $ref: "#/components/schemas/google.rpc.ErrorInfo" }],
          items: { $ref: "#/components/schemas/google.protobuf.Any" },
        },
      },
      additionalProperties: false,
    },
    "google.rpc.ErrorInfo": {
      type: "object",
      description: "Why the call failed, as a stable machine-readable reason.",
      required: ["@type", "reason", "domain", "metadata"],
      properties: {
        "@type": { const: errorInfoType },
        reason: {
          type: "string",
          description: "UPPER_SNAKE_CASE, e.g. INVALID_CREDENTIALS, INVALID_FIELD.",
        },
        domain: { const: errorDomain },
        metadata: {
          type: "object",
          additionalProperties: { type: "string" },
          description: "Context, e.g. `field`: the field, body key or query parameter at fault.",
        },
      },
      additionalProperties: false,
    },
    "google.protobuf.Any": {
      type: "object",
      description:
        "A further detail: the proto JSON of its message beside `@type` (e.g. " +
        "buf.validate.Violations), or `value` in base64 for a type the server does not know.",
      required: ["@type"],
      properties: { "@type": { type: "string" } },
      additionalProperties: true,
    },
  };
}

/**
 * The OpenAPI 3.1 document of the REST bindings of the given services, in the JSON form
 * the transcoder answers with. Deterministic: the same input gives the same document.
 */
export function buildOpenApi(input: OpenApiInput): JsonObject {
  const { services, comments } = input;
  const methods = services.flatMap((s) => s.methods.filter((m) => m.methodKind === "unary"));
  const outputs = reachable(methods.map((m) => m.output));
  const nameOf = (message: DescMessage, direction: Direction) =>
    direction === "input" && outputs.has(message) ? `${message.typeName}.Input` : message.typeName;
  const schemas = new SchemaSet((d) => comments.of(d), nameOf);

  const paths = new Map<string, JsonObject>();
  for (const method of methods) {
    const rule = input.authRules.get(`${method.parent.typeName}/${method.name}`);
    for (const binding of bindingsOf(method, httpRulesOf(method))) {
      const item = paths.get(binding.path) ?? {};
      const operation = operationOf(binding, rule, schemas, (m) => comments.of(m));
      const other = input.otherRequestContent?.get(`${method.parent.typeName}/${method.name}`);
      const body = operation.requestBody as { content?: JsonObject } | undefined;
      if (other !== undefined && body?.content !== undefined) {
        body.content = { ...body.content, ...other };
      }
      item[binding.httpMethod.toLowerCase()] = operation;
      paths.set(binding.path, item);
    }
  }
  const sortedPaths: JsonObject = {};
  for (const p of [...paths.keys()].sort()) sortedPaths[p] = paths.get(p) ?? {};

  const tags = services
    .filter((s) => s.methods.some((m) => httpRulesOf(m).length > 0))
    .map((s) => {
      const tag: JsonObject = { name: s.name };
      const description = comments.of(s);
      tag.description = description ? `${description}\n\n(${s.typeName})` : s.typeName;
      return tag;
    });

  return {
    openapi: "3.1.0",
    info: {
      title: "Traitgate REST API",
      version: input.version,
      description:
        "The REST view of Traitgate's gRPC services, generated from proto/ and its " +
        "google.api.http annotations (npm run generate). The same methods answer gRPC, " +
        "gRPC-Web and Connect at /<package.Service>/<Method>. See docs/api.md.",
    },
    tags,
    paths: sortedPaths,
    components: {
      schemas: { ...schemas.components(), ...errorSchemas() },
      responses: {
        Error: {
          description: "An error: the gRPC code's HTTP status and an ErrorInfo.",
          headers: { "x-request-id": { $ref: "#/components/headers/RequestId" } },
          content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
        },
      },
      headers: {
        RequestId: {
          description: "The request's id (the one sent, if sane, else a generated UUID).",
          schema: { type: "string" },
        },
      },
      securitySchemes: {
        bearerAuth: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description:
            "An access token from /auth/login, /auth/refresh or /auth/token (a plugin's " +
            "credential on the gateway). The requirement's list names the roles of which the " +
            "caller needs one (empty: any authenticated caller).",
        },
        apiKeyAuth: {
          type: "apiKey",
          in: "header",
          name: "X-API-Key",
          description:
            "An API key (tgk_…) with every scope the requirement's list names; " +
            "administrative methods need it beside the bearer token.",
        },
      },
    },
  };
}
