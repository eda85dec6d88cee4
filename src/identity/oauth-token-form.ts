import type { OutgoingHttpHeaders } from "node:http";
import { create, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  IdentityService,
  TokenRequestSchema,
  type TokenResponse,
} from "../../gen/traitgate/identity/v1/identity_pb.js";
import type { HttpRoute, NodeRequest, NodeResponse } from "../server/app.js";
import { noteOutcome } from "../server/call-record.js";
import type { CallRecord } from "../server/context.js";
import { reasonOf } from "../server/error-boundary.js";
import { httpStatusOf } from "../server/http-status.js";
import { ClientGoneError, readLimited } from "../server/transcoder/body.js";
import { RestError } from "../server/transcoder/errors.js";
import { tokenPath } from "./discovery.js";

/**
 * The standard OAuth 2.0 client-credentials request on `/auth/token` (RFC 6749 §4.4):
 * `application/x-www-form-urlencoded` with `grant_type=client_credentials`, the client
 * authenticated with HTTP Basic (client_secret_basic) or `client_id` and `client_secret` in
 * the form (client_secret_post). The form becomes the Token method's request and goes through
 * the same interceptors and handler as the JSON request (validation, throttle, audit,
 * `Cache-Control: no-store`); only the error body differs: RFC 6749 §5.2's
 * `{"error", "error_description"}`, plus Traitgate's stable `reason`. JSON requests to the same
 * path keep the REST transcoder and its error body.
 */

type OAuthErrorCode =
  | "invalid_request"
  | "invalid_client"
  | "invalid_scope"
  | "unsupported_grant_type"
  | "temporarily_unavailable"
  | "server_error";

/** An RFC 6749 §5.2 error answered before the Token method is called. */
class OAuthError extends Error {
  constructor(
    readonly status: number,
    readonly error: OAuthErrorCode,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

const tokenMethodPath = `/${IdentityService.typeName}/Token`;
/** The parameters this endpoint reads; each may appear once (RFC 6749 §3.2). */
const known = ["grant_type", "client_id", "client_secret", "scope"] as const;

/** `application/x-www-form-urlencoded`, with any parameters (the charset is checked later). */
export function isFormContentType(value: string | undefined): boolean {
  const type = value?.split(";", 1)[0]?.trim().toLowerCase();
  return type === "application/x-www-form-urlencoded";
}

function charsetOf(contentType: string): string | undefined {
  for (const param of contentType.split(";").slice(1)) {
    const [name = "", value = ""] = param.split("=");
    if (name.trim().toLowerCase() === "charset") {
      return value.trim().replaceAll('"', "").toLowerCase();
    }
  }
  return undefined;
}

const invalidRequest = (reason: string, message: string) =>
  new OAuthError(400, "invalid_request", reason, message);

/** The form's fields, validated as RFC 6749 §3.2 and §4.4.2 ask. */
export function tokenFormFields(body: Uint8Array): {
  grantType: string;
  clientId: string;
  clientSecret: string;
} {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  } catch {
    throw invalidRequest("MALFORMED_FORM", "the form body is not valid UTF-8");
  }
  const form = new URLSearchParams(text);
  for (const name of known) {
    if (form.getAll(name).length > 1) {
      throw invalidRequest("DUPLICATE_PARAMETER", `${name} is given more than once`);
    }
  }
  // A parameter sent without a value counts as left out (RFC 6749 §3.2); others are ignored.
  const field = (name: (typeof known)[number]) => form.get(name) ?? "";
  const grantType = field("grant_type");
  if (grantType === "") throw invalidRequest("MISSING_GRANT_TYPE", "grant_type is required");
  if (grantType !== "client_credentials") {
    throw new OAuthError(
      400,
      "unsupported_grant_type",
      "UNSUPPORTED_GRANT_TYPE",
      'grant_type must be "client_credentials"',
    );
  }
  if (field("scope") !== "") {
    throw new OAuthError(
      400,
      "invalid_scope",
      "SCOPE_NOT_SUPPORTED",
      "scope is not supported: a token carries its account's roles; leave scope out",
    );
  }
  return { grantType, clientId: field("client_id"), clientSecret: field("client_secret") };
}

/** What the Token method's errors are in RFC 6749 §5.2's terms. */
function fromConnectError(err: ConnectError): {
  status: number;
  error: OAuthErrorCode;
  reason: string;
} {
  const reason = reasonOf(err) ?? Code[err.code];
  switch (reason) {
    case "INVALID_CLIENT":
    case "MISSING_CLIENT_ID":
      // No client authentication at all is invalid_client too (RFC 6749 §5.2).
      return { status: 401, error: "invalid_client", reason };
    case "AMBIGUOUS_CLIENT_CREDENTIALS":
    case "INVALID_FIELD":
      return { status: 400, error: "invalid_request", reason };
  }
  const status = httpStatusOf(err.code);
  if (status === 429 || status === 503) return { status, error: "temporarily_unavailable", reason };
  if (status >= 500) return { status, error: "server_error", reason };
  return { status, error: "invalid_request", reason };
}

function send(res: NodeResponse, status: number, headers: OutgoingHttpHeaders, body: unknown) {
  if (res.headersSent || res.destroyed) return;
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": String(bytes.length),
  });
  res.end(bytes);
}

/** Headers a handler or interceptor set (no-store, Retry-After, x-request-id), not the protocol's. */
function passedOn(source: Headers, into: OutgoingHttpHeaders): OutgoingHttpHeaders {
  for (const [name, value] of source) {
    if (/^(content-|grpc-|connect-)/.test(name)) continue;
    into[name] = value;
  }
  return into;
}

async function readForm(req: NodeRequest, maxBytes: number): Promise<Uint8Array> {
  const charset = charsetOf(req.headers["content-type"] ?? "");
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8") {
    throw invalidRequest("UNSUPPORTED_CHARSET", "the form must be UTF-8 (charset=utf-8)");
  }
  const declared = Number(req.headers["content-length"] ?? 0);
  const tooLarge = new OAuthError(
    413,
    "invalid_request",
    "BODY_TOO_LARGE",
    `the request body is larger than ${maxBytes} bytes`,
  );
  if (declared > maxBytes) throw tooLarge;
  try {
    return await readLimited(req, maxBytes);
  } catch (err) {
    if (err instanceof RestError) throw tooLarge;
    throw err;
  }
}

/** The RFC 6749 §5.2 answer to an error of the form or of the Token method. */
function answerOf(
  err: unknown,
  record: CallRecord,
): {
  status: number;
  error: OAuthErrorCode;
  reason: string;
  message: string;
  headers: OutgoingHttpHeaders;
} {
  if (err instanceof OAuthError) {
    // The Token method never ran: the outcome is noted here.
    const code = err.status === 413 ? Code.ResourceExhausted : Code.InvalidArgument;
    noteOutcome(record, code, err.reason);
    return {
      status: err.status,
      error: err.error,
      reason: err.reason,
      message: err.message,
      headers: {},
    };
  }
  if (err instanceof ConnectError) {
    // Mapped and noted by the request interceptor (src/server/error-boundary.ts).
    return {
      ...fromConnectError(err),
      message: err.rawMessage,
      headers: passedOn(err.metadata, {}),
    };
  }
  noteOutcome(record, Code.Internal, "INTERNAL");
  return {
    status: 500,
    error: "server_error",
    reason: "INTERNAL",
    message: "internal error",
    headers: {},
  };
}

/** The form request as OpenAPI describes it (gen/openapi.json, beside the JSON body). */
export const tokenFormOpenApi: JsonObject = {
  "application/x-www-form-urlencoded": {
    schema: {
      type: "object",
      description:
        "OAuth 2.0 client credentials (RFC 6749 §4.4): the client authenticates with HTTP Basic " +
        "(client_secret_basic) or client_id and client_secret in the form (client_secret_post), " +
        'not both. Errors have RFC 6749 §5.2\'s shape: {"error", "error_description", "reason"}.',
      required: ["grant_type"],
      properties: {
        grant_type: { type: "string", enum: ["client_credentials"] },
        client_id: { type: "string", pattern: "^[a-z0-9][a-z0-9-]{1,62}$" },
        client_secret: { type: "string", maxLength: 256 },
      },
    },
  },
};

/** The route that answers form-encoded token requests on `/auth/token`. */
export function createOAuthTokenFormRoute(): HttpRoute {
  return {
    path: tokenPath,
    takes: (req) => req.method === "POST" && isFormContentType(req.headers["content-type"]),
    async serve(req, res, call) {
      call.record.rpc = tokenMethodPath.slice(1);
      call.record.route = `POST ${tokenPath}`;
      try {
        const fields = tokenFormFields(await readForm(req, call.maxBodyBytes));
        const outcome = await call.invoke(tokenMethodPath, create(TokenRequestSchema, fields));
        const reply = outcome.message as TokenResponse;
        const headers = passedOn(outcome.trailer, passedOn(outcome.header, {}));
        send(res, 200, headers, {
          access_token: reply.accessToken,
          token_type: reply.tokenType,
          expires_in: reply.expiresIn,
        });
      } catch (err) {
        if (err instanceof ClientGoneError) return;
        const { status, error, reason, message, headers } = answerOf(err, call.record);
        // RFC 6749 §5.2: a 401 names the scheme the client can authenticate with (Basic).
        if (status === 401) headers["www-authenticate"] = 'Basic realm="traitgate"';
        // Stop an HTTP/1.1 client still sending a body that will not be read.
        if (status === 413 && req.httpVersionMajor === 1) headers.connection = "close";
        send(res, status, headers, { error, error_description: message, reason });
      }
    },
  };
}
