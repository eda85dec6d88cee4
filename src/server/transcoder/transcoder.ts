import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { type Registry, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { codeFromHttpStatus, errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import type { Logger } from "../../log.js";
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
  /** The handlers of a ConnectRouter (createConnectRouter(...).handlers): the same handlers and interceptors that serve gRPC/Connect. */
  handlers: readonly UniversalHandler[];
  /** Registry of all message types (for Any/error details to JSON). */
  registry: Registry;
  /** Request bodies larger than this answer 413. */
  maxBodyBytes: number;
  /** Context values for each request (the server passes remote address etc.). Optional. */
  contextValues?: (req: NodeRequest) => ContextValues;
  /** Where unexpected transcoder failures are logged (they answer a generic 500). */
  log?: Logger;
}

export type RestHandler = (req: NodeRequest, res: NodeResponse) => void;

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

/** The incoming headers a handler sees, as for a Connect unary call with a binary body. */
function handlerHeaders(req: NodeRequest): Headers {
  const header = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || isProtocolHeader(name)) continue;
    for (const v of Array.isArray(value) ? value : [value]) {
      try {
        header.append(name, v);
      } catch {
        // a value fetch's Headers refuses: the handler does not need it
      }
    }
  }
  header.set("content-type", "application/proto");
  header.set("connect-protocol-version", "1");
  return header;
}

/** The handler's response headers and Connect unary trailers (`trailer-` prefixed) for the REST answer. */
function answerHeaders(response: UniversalServerResponse): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const source of [response.header, response.trailer]) {
    if (source === undefined) continue;
    for (const [key, value] of source) {
      const name = key.startsWith("trailer-") ? key.slice("trailer-".length) : key;
      if (isProtocolHeader(name) || name === "set-cookie") continue;
      const prior = out[name];
      out[name] = prior === undefined ? value : `${String(prior)}, ${value}`;
    }
    const cookies = source.getSetCookie();
    if (cookies.length > 0) out["set-cookie"] = cookies;
  }
  return out;
}

async function collect(body: AsyncIterable<Uint8Array> | undefined): Promise<Uint8Array> {
  if (body === undefined) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return Buffer.concat(chunks);
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}

function send(res: NodeResponse, status: number, headers: OutgoingHttpHeaders, body: string): void {
  if (res.headersSent || res.destroyed) return;
  const bytes = Buffer.from(body);
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
): void {
  if (err instanceof ClientGoneError) return;
  let answer: ErrorResponse;
  if (err instanceof RestError) {
    answer = restErrorResponse(err);
    // Stop an HTTP/1.1 client that is still sending a body we will not read.
    if (err.status === 413 && req.httpVersionMajor === 1) answer.headers.connection = "close";
  } else if (err instanceof ConnectError) {
    answer = connectErrorResponse(err, registry);
  } else {
    log?.error({ err, path: req.url?.split("?", 1)[0] }, "REST transcoding failed");
    answer = internalErrorResponse();
  }
  send(res, answer.status, answer.headers, answer.body);
}

/** Calls the route's handler in process, as a Connect unary call with a binary body. */
async function invoke(
  route: Route,
  req: NodeRequest,
  res: NodeResponse,
  request: Uint8Array,
  options: RestTranscoderOptions,
): Promise<UniversalServerResponse> {
  const abort = new AbortController();
  res.once("close", () =>
    abort.abort(new ConnectError("the client closed the request", Code.Canceled)),
  );
  const encrypted = "encrypted" in req.socket && req.socket.encrypted === true;
  const authority = req.headers[":authority"] ?? req.headers.host ?? "localhost";
  return route.handler({
    httpVersion: req.httpVersion,
    method: "POST",
    url: `${encrypted ? "https" : "http"}://${String(authority)}${route.handler.requestPath}`,
    header: handlerHeaders(req),
    body: once(request),
    signal: abort.signal,
    contextValues: options.contextValues?.(req),
  });
}

async function serve(
  trie: RouteTrie<Route>,
  req: NodeRequest,
  res: NodeResponse,
  options: RestTranscoderOptions,
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
  const body =
    route.body.kind === "none" ? undefined : await readJsonBody(req, options.maxBodyBytes);
  const query = q < 0 ? "" : url.slice(q + 1);
  const message = buildRequestMessage(route, body, match.segments, query, options.registry);
  const response = await invoke(route, req, res, toBinary(route.input, message), options);
  const bytes = await collect(response.body);
  const headers = answerHeaders(response);
  if (response.status === 200) {
    send(res, 200, headers, responseJson(route, bytes, options.registry));
    return;
  }
  const fallback = new ConnectError(`HTTP ${response.status}`, codeFromHttpStatus(response.status));
  let err: ConnectError;
  try {
    err = errorFromJsonBytes(bytes, undefined, fallback);
  } catch {
    err = fallback;
  }
  const answer = connectErrorResponse(err, options.registry);
  send(res, answer.status, { ...headers, ...answer.headers }, answer.body);
}

/**
 * Serves REST over the given Connect handlers, routed by their
 * `google.api.http` annotations. The route table is built once, here; the
 * returned handler answers every request it is given, with a REST error
 * when no route matches.
 */
export function createRestTranscoder(options: RestTranscoderOptions): RestHandler {
  const trie = new RouteTrie<Route>();
  for (const route of buildRoutes(options.handlers))
    trie.add(route.template, route.httpMethod, route);
  return (req, res) => {
    serve(trie, req, res, options).catch((err: unknown) =>
      sendError(req, res, err, options.registry, options.log),
    );
  };
}

/** The route table, for docs and tests. */
export function listRestRoutes(
  handlers: readonly UniversalHandler[],
): { method: string; template: string; rpc: string }[] {
  return buildRoutes(handlers).map((r) => ({
    method: r.httpMethod,
    template: r.template.source,
    rpc: r.rpc,
  }));
}
