import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Registry } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues, createContextValues } from "@connectrpc/connect";
import type { Logger } from "../../log.js";
import { noteError, noteOutcome } from "../call-record.js";
import { type CallRecord, callRecordKey } from "../context.js";
import { presetResponseOf } from "../preset-encoding.js";
import { RequestHeaders } from "../request-headers.js";
import { CallSignal, type UnaryMethods, type UnaryOutcome, type UnarySpec } from "../unary.js";
import { ClientGoneError, readJsonBody } from "./body.js";
import {
  connectErrorResponse,
  type ErrorResponse,
  internalErrorResponse,
  RestError,
  restErrorResponse,
} from "./errors.js";
import { buildRequestMessage, responseJson } from "./rest-json.js";
import { RouteTrie } from "./route-trie.js";
import { buildRoutes, type Route } from "./routes.js";

type NodeRequest = IncomingMessage | Http2ServerRequest;
type NodeResponse = ServerResponse | Http2ServerResponse;

export interface RestTranscoderOptions {
  /**
   * The router's unary methods (UnaryMethods.recording): the same implementations and
   * interceptors that serve gRPC and Connect, called in process with the request message.
   */
  methods: UnaryMethods;
  /** Registry of all message types (for Any/error details to JSON). */
  registry: Registry;
  /** Request bodies larger than this answer 413. */
  maxBodyBytes: number;
  /** Context values of a request the handler is not given any for. Optional. */
  contextValues?: (req: NodeRequest) => ContextValues;
  /** Where unexpected transcoder failures are logged (they answer a generic 500). */
  log?: Logger;
}

/**
 * Answers one request; resolves once it is answered (or its client is gone). The context
 * values are the request's (the server's: client address, request id, the call's record,
 * in which the route and the outcome of a call the transcoder answers itself are noted).
 */
export type RestHandler = (
  req: NodeRequest,
  res: NodeResponse,
  contextValues?: ContextValues,
) => Promise<void>;

/** Request headers that describe the REST exchange, not the call: never passed to the handler. */
const hopByHop = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "http2-settings",
  "accept-encoding",
]);

function isProtocolHeader(name: string): boolean {
  return (
    hopByHop.has(name) ||
    name.startsWith(":") ||
    name.startsWith("content-") ||
    name.startsWith("connect-") ||
    name.startsWith("grpc-")
  );
}

/** The incoming headers a handler sees: the request's, without those of the HTTP exchange. */
function handlerHeaders(req: NodeRequest): Headers {
  const pairs: string[] = [];
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || isProtocolHeader(name)) continue;
    if (Array.isArray(value)) for (const v of value) pairs.push(name, v);
    else pairs.push(name, value);
  }
  return new RequestHeaders(pairs);
}

/** The handler's response headers and trailers, as the REST answer's headers. */
function answerHeaders(sources: readonly Headers[]): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const source of sources) {
    for (const [name, value] of source) {
      if (isProtocolHeader(name) || name === "set-cookie") continue;
      const prior = out[name];
      out[name] = prior === undefined ? value : `${String(prior)}, ${value}`;
    }
    const cookies = source.getSetCookie();
    if (cookies.length > 0) out["set-cookie"] = cookies;
  }
  return out;
}

/** Whether the client is gone: an HTTP/1.1 socket or an HTTP/2 stream closed. */
const gone = (res: NodeResponse) =>
  "stream" in res ? res.stream.destroyed || res.stream.closed : res.destroyed;

function send(
  res: NodeResponse,
  status: number,
  headers: OutgoingHttpHeaders,
  body: string | Uint8Array,
): void {
  if (res.headersSent || gone(res)) return;
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": String(bytes.length),
  });
  res.end(bytes);
}

function sendError(
  req: NodeRequest,
  res: NodeResponse,
  err: unknown,
  registry: Registry,
  log: Logger | undefined,
  call: CallRecord | undefined,
): void {
  if (err instanceof ClientGoneError) return;
  let answer: ErrorResponse;
  if (err instanceof RestError) {
    noteOutcome(call, err.code, err.reason);
    answer = restErrorResponse(err);
    // Stop an HTTP/1.1 client that is still sending a body we will not read.
    if (err.status === 413 && req.httpVersionMajor === 1) answer.headers.connection = "close";
  } else if (err instanceof ConnectError) {
    noteError(call, err);
    answer = connectErrorResponse(err, registry);
    // What the interceptors attached to the error (x-request-id), as on gRPC's trailers.
    const metadata: Record<string, string> = {};
    for (const [name, value] of err.metadata) if (!isProtocolHeader(name)) metadata[name] = value;
    answer.headers = { ...metadata, ...answer.headers };
  } else {
    log?.error({ err, route: call?.route }, "REST transcoding failed");
    noteOutcome(call, Code.Internal, "INTERNAL");
    answer = internalErrorResponse();
  }
  send(res, answer.status, answer.headers, answer.body);
}

/** Calls a method in process with the request message, behind the router's interceptors. */
export function invokeFromHttp(
  spec: UnarySpec,
  req: NodeRequest,
  res: NodeResponse,
  message: Parameters<UnaryMethods["invoke"]>[1],
  methods: UnaryMethods,
  contextValues: ContextValues,
): Promise<UnaryOutcome> {
  const client = new CallSignal(res);
  const encrypted = "encrypted" in req.socket && req.socket.encrypted === true;
  const authority = req.headers[":authority"] ?? req.headers.host ?? "localhost";
  return methods
    .invoke(spec, message, {
      protocolName: "rest",
      requestHeader: handlerHeaders(req),
      url: `${encrypted ? "https" : "http"}://${String(authority)}/${spec.method.parent.typeName}/${spec.method.name}`,
      call: client,
      contextValues,
    })
    .finally(() => client.end());
}

/** The request message as far as the path gives it: for the record of a call refused before its body was read. */
function pathOnlyMessage(route: Route, segments: readonly string[], registry: Registry) {
  try {
    return buildRequestMessage(route, undefined, segments, "", registry);
  } catch {
    return undefined;
  }
}

async function serve(
  trie: RouteTrie<Route>,
  req: NodeRequest,
  res: NodeResponse,
  options: RestTranscoderOptions,
  contextValues: ContextValues,
): Promise<void> {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  const path = q < 0 ? url : url.slice(0, q);
  const match = trie.match(path, req.method ?? "GET");
  if (match.kind === "not_found") {
    throw new RestError(404, Code.NotFound, "NOT_FOUND", `no REST route for ${req.method} ${path}`);
  }
  if (match.kind === "method_not_allowed") {
    const allow = match.allowed.join(", ");
    throw new RestError(
      405,
      Code.Unimplemented,
      "METHOD_NOT_ALLOWED",
      `${req.method} is not allowed here; allowed: ${allow}`,
      {},
      { allow },
    );
  }
  const route = match.route;
  const call = contextValues.get(callRecordKey);
  if (call !== undefined) {
    call.rpc = `${route.spec.method.parent.typeName}/${route.spec.method.name}`;
    call.route = `${route.httpMethod} ${route.template.source}`;
  }
  let message: ReturnType<typeof buildRequestMessage>;
  try {
    const body =
      route.body.kind === "none" ? undefined : await readJsonBody(req, options.maxBodyBytes);
    const query = q < 0 ? "" : url.slice(q + 1);
    message = buildRequestMessage(route, body, match.segments, query, options.registry);
  } catch (err) {
    if (call !== undefined) call.message = pathOnlyMessage(route, match.segments, options.registry);
    throw err;
  }
  const outcome = await invokeFromHttp(
    route.spec,
    req,
    res,
    message,
    options.methods,
    contextValues,
  );
  // A handler that has the answer's JSON already (a plugin's reply) gives it as it is.
  const preset = presetResponseOf(outcome.message)?.restField;
  send(
    res,
    200,
    answerHeaders([outcome.header, outcome.trailer]),
    preset !== undefined && preset.name === route.responseField?.name
      ? preset.json
      : responseJson(route, outcome.message, options.registry),
  );
}

/**
 * Serves REST over the given Connect handlers, routed by their
 * `google.api.http` annotations. The route table is built once, here; the
 * returned handler answers every request it is given, with a REST error
 * when no route matches.
 */
export function createRestTranscoder(options: RestTranscoderOptions): RestHandler {
  const trie = new RouteTrie<Route>();
  for (const route of buildRoutes(options.methods.specs()))
    trie.add(route.template, route.httpMethod, route);
  return (req, res, contextValues = options.contextValues?.(req) ?? createContextValues()) =>
    serve(trie, req, res, options, contextValues).catch((err: unknown) =>
      sendError(req, res, err, options.registry, options.log, contextValues.get(callRecordKey)),
    );
}

/** The route table, for docs and tests. */
export function listRestRoutes(
  methods: UnaryMethods,
): { method: string; template: string; rpc: string }[] {
  return buildRoutes(methods.specs()).map((r) => ({
    method: r.httpMethod,
    template: r.template.source,
    rpc: r.rpc,
  }));
}
