import { constants, type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
// Connect marks protocol-grpc's parseTimeout and setTrailerStatus as internal: exported, but
// outside semantic versioning. The lock file pins Connect; on an upgrade,
// test/unit/grpc-unary.test.ts and the protocol matrix (test/integration/protocols.test.ts)
// are what tell whether they still hold.
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { Logger } from "../log.js";
import { noteError, noteOutcome } from "./call-record.js";
import { callRecordKey } from "./context.js";
import { presetResponseOf } from "./preset-encoding.js";
import { RequestHeaders } from "./request-headers.js";
import { CallSignal, type UnaryMethods, type UnarySpec } from "./unary.js";

/**
 * gRPC unary calls, served without Connect's streaming pipeline: read the one
 * length-prefixed message, decode it, run the method behind the router's
 * interceptors (UnaryMethods), answer with one message and the status in
 * trailers. The same errors, headers and trailers reach the client as through
 * Connect's gRPC handler; what this path does not take (compressed requests,
 * gRPC over HTTP/1.1, JSON codec, streaming methods, gRPC-Web, Connect) stays
 * with Connect.
 */

const contentType = "application/grpc+proto";

/** Whether a request to a unary method's path is plain gRPC this path serves. */
export function isPlainGrpc(req: {
  httpVersionMajor: number;
  method?: string | undefined;
  headers: Record<string, string | string[] | undefined>;
}): boolean {
  if (req.httpVersionMajor !== 2 || req.method !== "POST") return false;
  const type = req.headers["content-type"];
  if (type !== "application/grpc" && type !== contentType) return false;
  const encoding = req.headers["grpc-encoding"];
  return encoding === undefined || encoding === "identity";
}

export interface GrpcUnaryOptions {
  methods: UnaryMethods;
  /** Largest request message; larger ones answer RESOURCE_EXHAUSTED, as Connect's readMaxBytes. */
  maxBodyBytes: number;
  contextValues: ContextValues;
  log: Logger;
}

/** The request's metadata for the handler: every header but HTTP/2's pseudo-headers. */
function requestHeader(req: Http2ServerRequest): Headers {
  const raw = req.rawHeaders;
  const pairs: string[] = [];
  // HTTP/2 names are lowercase; the pseudo-headers come first, but need not.
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    if (!name.startsWith(":")) pairs.push(name, raw[i + 1] as string);
  }
  return new RequestHeaders(pairs);
}

/**
 * The whole request body, or a ConnectError as soon as the message is known to be longer
 * than `limit` bytes (from its declared length, or from the bytes received). The request
 * is paused then, so HTTP/2 flow control stops the client rather than the server reading
 * and dropping the rest.
 */
function readBody(req: Http2ServerRequest, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const tooLarge = () => {
      req.off("data", onData);
      req.pause();
      reject(
        new ConnectError(
          `message size is larger than configured readMaxBytes ${limit}`,
          Code.ResourceExhausted,
        ),
      );
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      chunks.push(chunk);
      if (size > limit + 5) return tooLarge();
      if (size >= 5 && chunks.length <= 2) {
        const head = chunks.length === 1 ? chunk : Buffer.concat(chunks);
        if (head.readUInt32BE(1) > limit) tooLarge();
      }
    };
    req.on("data", onData);
    req.once("end", () =>
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks)),
    );
    req.once("error", reject);
  });
}

/** The one message of a unary request body (5-byte envelope prefix, then the message). */
function singleMessage(body: Buffer): Uint8Array {
  if (body.length === 0) {
    throw new ConnectError(
      "protocol error: missing input message for unary method",
      Code.Unimplemented,
    );
  }
  if (body.length < 5)
    throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
  const flags = body[0] ?? 0;
  const length = body.readUInt32BE(1);
  if (flags & 0b1) {
    throw new ConnectError(
      "received compressed envelope, but do not know how to decompress",
      Code.Internal,
    );
  }
  if (flags !== 0) throw new ConnectError("protocol error: invalid envelope flags", Code.Internal);
  if (body.length < 5 + length) {
    throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
  }
  if (body.length > 5 + length) {
    throw new ConnectError(
      "protocol error: received extra input message for unary method",
      Code.Unimplemented,
    );
  }
  return body.subarray(5);
}

function headersObject(...sources: Headers[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const source of sources) for (const [name, value] of source) out[name] = value;
  return out;
}

/** Whether the client is gone (its stream reset or closed): nothing can be sent then. */
const gone = (res: Http2ServerResponse) => res.stream.destroyed || res.stream.closed;

/** Answers with no message: headers, then the status in trailers (as Connect's handler does). */
function sendStatus(res: Http2ServerResponse, error: ConnectError, log: Logger): void {
  if (res.headersSent || gone(res)) return;
  try {
    res.writeHead(200, { "content-type": contentType });
    res.addTrailers(headersObject(setTrailerStatus(new Headers(), error)));
    res.end();
  } catch (err) {
    // Headers a handler set that HTTP/2 refuses (e.g. connection headers) in the metadata.
    log.error({ err }, "gRPC status could not be sent");
    res.stream.close(constants.NGHTTP2_INTERNAL_ERROR);
  }
}

export async function serveGrpcUnary(
  spec: UnarySpec,
  req: Http2ServerRequest,
  res: Http2ServerResponse,
  options: GrpcUnaryOptions,
): Promise<void> {
  // The handler's signal aborts when the client goes away before the answer is written
  // (RST_STREAM, a closed connection), as with Connect's handler.
  const client = new CallSignal(res);
  try {
    const timeout = parseTimeout(
      (req.headers["grpc-timeout"] as string | undefined) ?? null,
      Number.MAX_SAFE_INTEGER,
    );
    if (timeout.error) throw timeout.error;
    if (timeout.timeoutMs !== undefined) client.setDeadline(timeout.timeoutMs);
    const bytes = singleMessage(await readBody(req, options.maxBodyBytes));
    let input: ReturnType<typeof fromBinary>;
    try {
      input = fromBinary(spec.method.input, bytes);
    } catch (err) {
      throw new ConnectError(
        `parse binary: ${err instanceof Error ? err.message : String(err)}`,
        Code.Internal,
      );
    }
    const authority = req.headers[":authority"] ?? "localhost";
    const outcome = await options.methods.invoke(spec, input, {
      protocolName: "grpc",
      requestHeader: requestHeader(req),
      url: `${"encrypted" in req.socket && req.socket.encrypted ? "https" : "http"}://${authority}${req.url}`,
      call: client,
      contextValues: options.contextValues,
    });
    if (gone(res)) {
      client.end();
      return;
    }
    const message =
      presetResponseOf(outcome.message)?.binary?.() ??
      toBinary(spec.method.output, outcome.message);
    const frame = Buffer.allocUnsafe(5 + message.length);
    frame[0] = 0;
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    client.end();
    res.writeHead(200, { ...headersObject(outcome.header), "content-type": contentType });
    res.addTrailers({ ...headersObject(outcome.trailer), "grpc-status": "0" });
    res.end(frame);
  } catch (err) {
    client.end();
    // Errors of the call were noted by the interceptors; this adapter's own are noted here.
    const call = options.contextValues.get(callRecordKey);
    if (err instanceof ConnectError) {
      noteError(call, err);
      sendStatus(res, err, options.log);
      return;
    }
    // Interceptors map every error of a call; what arrives here is this adapter's own.
    noteOutcome(call, Code.Internal, "INTERNAL");
    options.log.error({ err, rpc: req.url }, "gRPC call failed");
    sendStatus(res, new ConnectError("internal error", Code.Internal), options.log);
  }
}
