import {
  create,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type Registry,
  toBinary,
  toJson,
} from "@bufbuild/protobuf";
import { isFieldError } from "@bufbuild/protobuf/reflect";
import { base64Encode } from "@bufbuild/protobuf/wire";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { Code, type ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../../gen/google/rpc/error_details_pb.js";
import { errorDomain } from "../error-boundary.js";
import { codeName, httpStatusOf } from "../http-status.js";
import { findShapeMismatch } from "./json-shape.js";

/**
 * An error the transcoder answers by itself, before or instead of calling a
 * handler. It carries one `google.rpc.ErrorInfo` with a stable reason.
 */
export class RestError extends Error {
  constructor(
    readonly status: number,
    readonly code: Code,
    readonly reason: string,
    message: string,
    readonly metadata: Record<string, string> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "RestError";
  }
}

/** A 400 about one field, body key or query parameter, named in the metadata `field`. */
export function invalidField(reason: string, field: string, message: string): RestError {
  return new RestError(400, Code.InvalidArgument, reason, message, field === "" ? {} : { field });
}

export function malformedJson(message: string): RestError {
  return new RestError(400, Code.InvalidArgument, "MALFORMED_JSON", message);
}

const unknownKeyPattern = /key "(.*)" is unknown$/;

/**
 * Maps an error of protobuf-es `fromJson`/`mergeFromJson` on the request body
 * to a 400 naming the unknown key or the field with a bad value: its path in the body and
 * the shape it takes when the body has the wrong shape there (src/server/transcoder/json-shape.ts).
 */
export function bodyJsonError(err: unknown, schema: DescMessage, json: JsonValue): RestError {
  const message = err instanceof Error ? err.message : String(err);
  const unknown = unknownKeyPattern.exec(message);
  if (unknown !== null) {
    const key = unknown[1] ?? "";
    return invalidField("UNKNOWN_FIELD", key, `unknown field "${key}" in the request body`);
  }
  const mismatch = findShapeMismatch(schema, json);
  if (mismatch !== undefined) {
    const { path, expected, got } = mismatch;
    return invalidField("INVALID_FIELD", path, `${path}: expected ${expected}, got ${got}`);
  }
  const cause = err instanceof Error ? err.cause : undefined;
  const field = isFieldError(cause) ? cause.field().name : "";
  return invalidField("INVALID_FIELD", field, message);
}

/** One entry of `details`: the proto JSON of a `google.protobuf.Any`. */
type DetailJson = JsonObject;

const typeUrlPrefix = "type.googleapis.com/";

/**
 * A detail as the JSON of an Any: `{"@type", ...fields}` with proto field
 * names, or `{"@type", "value": <base64>}` when the registry lacks its type.
 */
function detailJson(type: string, value: Uint8Array, registry: Registry): DetailJson {
  const typeUrl = typeUrlPrefix + type;
  try {
    const json = toJson(AnySchema, create(AnySchema, { typeUrl, value }), {
      registry,
      useProtoFieldName: true,
      alwaysEmitImplicit: true,
    });
    if (json !== null && typeof json === "object" && !Array.isArray(json)) {
      // "@type" first, as in the JSON of google.protobuf.Any everywhere else.
      const { "@type": _type, ...fields } = json;
      return { "@type": typeUrl, ...fields };
    }
  } catch {
    // unknown to the registry: fall through to the opaque form
  }
  return { "@type": typeUrl, value: base64Encode(value) };
}

function errorInfoJson(reason: string, metadata: Record<string, string>): DetailJson {
  const info = create(ErrorInfoSchema, { reason, domain: errorDomain, metadata });
  const fields = toJson(ErrorInfoSchema, info, {
    useProtoFieldName: true,
    alwaysEmitImplicit: true,
  });
  return { "@type": typeUrlPrefix + ErrorInfoSchema.typeName, ...(fields as JsonObject) };
}

/** The REST error body: `{"code", "message", "details"}`. */
export interface ErrorResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

function errorBody(code: Code, message: string, details: DetailJson[]): string {
  return JSON.stringify({ code: codeName(code), message, details });
}

export function restErrorResponse(err: RestError): ErrorResponse {
  return {
    status: err.status,
    headers: err.headers,
    body: errorBody(err.code, err.message, [errorInfoJson(err.reason, err.metadata)]),
  };
}

/** A handler's error (parsed from Connect's error JSON, or thrown) as a REST error. */
export function connectErrorResponse(err: ConnectError, registry: Registry): ErrorResponse {
  const details = err.details.map((d) =>
    "desc" in d
      ? detailJson(d.desc.typeName, toBinary(d.desc, create(d.desc, d.value)), registry)
      : detailJson(d.type, d.value, registry),
  );
  return {
    status: httpStatusOf(err.code),
    headers: {},
    body: errorBody(err.code, err.rawMessage, details),
  };
}

/** Fallback for a failure of the transcoder itself: generic, never the cause. */
export function internalErrorResponse(): ErrorResponse {
  return restErrorResponse(new RestError(500, Code.Internal, "INTERNAL", "internal error"));
}
