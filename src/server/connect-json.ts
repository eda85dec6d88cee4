import type { IncomingMessage, ServerResponse } from "node:http";
import { constants, type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { errorInfo } from "./error-boundary.js";
import { bodyTooLarge, ClientGoneError, readLimited } from "./transcoder/body.js";
import { bodyJsonError, malformedJson, RestError } from "./transcoder/errors.js";
import type { UnarySpec } from "./unary.js";

type NodeRequest = IncomingMessage | Http2ServerRequest;
type NodeResponse = ServerResponse | Http2ServerResponse;

/**
 * Connect's unary JSON calls (`POST /<service>/<method>`, `content-type: application/json`)
 * with a body that is not the request message: answered as the REST paths answer them, a 400
 * with a `google.rpc.ErrorInfo` that names the field (`INVALID_FIELD` and the key's path,
 * `UNKNOWN_FIELD`, `MALFORMED_JSON`), not with protobuf-es's decode message alone (which names
 * the proto type, and carries no reason a client can branch on).
 *
 * The body is read and checked here, then handed to Connect already parsed; Connect decodes it
 * again (a second `fromJson` on a path that is not a hot one: services call over gRPC).
 * Compressed bodies (`content-encoding`) are Connect's own to read.
 */
export function isConnectJsonUnary(req: NodeRequest, spec: UnarySpec | undefined): boolean {
  return (
    spec !== undefined &&
    req.method === "POST" &&
    connectUnaryJson.test(req.headers["content-type"] ?? "") &&
    req.headers["content-encoding"] === undefined
  );
}

/** The content types Connect takes for unary JSON (any other is Connect's to refuse). */
const connectUnaryJson = /^application\/json(?:; ?charset=utf-?8)?$/i;

/** As fetch and Connect decode a body: UTF-8, a leading byte order mark dropped. */
const utf8 = new TextDecoder();

/** What reading a Connect JSON body gave: the parsed body, an error to answer, or no client. */
export type ConnectJsonRead =
  | { kind: "json"; json: JsonValue }
  | { kind: "refused"; error: ConnectError; reason: string }
  | { kind: "gone" };

export async function readConnectJson(
  req: NodeRequest,
  spec: UnarySpec,
  maxBytes: number,
): Promise<ConnectJsonRead> {
  try {
    const declared = Number(req.headers["content-length"] ?? 0);
    if (declared > maxBytes) throw bodyTooLarge(maxBytes);
    const body = await readLimited(req, maxBytes);
    let json: JsonValue;
    try {
      json = JSON.parse(utf8.decode(body)) as JsonValue;
    } catch {
      throw malformedJson("the request body is not valid JSON");
    }
    try {
      fromJson(spec.method.input, json);
    } catch (err) {
      throw bodyJsonError(err, spec.method.input, json);
    }
    return { kind: "json", json };
  } catch (err) {
    if (err instanceof ClientGoneError) return { kind: "gone" };
    if (!(err instanceof RestError)) throw err;
    const details = [errorInfo(err.reason, err.metadata)];
    return {
      kind: "refused",
      error: new ConnectError(err.message, err.code, undefined, details),
      reason: err.reason,
    };
  }
}

/**
 * A Connect unary error response (its JSON error body), with the call's request id. What is
 * left of a body too large is not read: HTTP/1.1 closes the connection after the answer, and
 * HTTP/2 resets the stream (NO_ERROR, after the complete answer: the client stops sending).
 */
export function sendConnectError(
  req: NodeRequest,
  res: NodeResponse,
  error: ConnectError,
  requestId: string,
): void {
  const body = errorToJsonBytes(error, {});
  res.writeHead(codeToHttpStatus(error.code), {
    "content-type": "application/json",
    "content-length": String(body.byteLength),
    "x-request-id": requestId,
    ...(error.code === Code.ResourceExhausted && req.httpVersionMajor === 1
      ? { connection: "close" }
      : {}),
  });
  if (error.code !== Code.ResourceExhausted || req.httpVersionMajor === 1) {
    res.end(body);
    req.resume();
    return;
  }
  const { stream } = res as Http2ServerResponse;
  res.end(body, () => stream.close(constants.NGHTTP2_NO_ERROR));
}
