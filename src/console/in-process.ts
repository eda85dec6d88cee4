import { createContextValues, type Transport } from "@connectrpc/connect";
import type {
  UniversalClientFn,
  UniversalHandler,
  UniversalServerRequest,
} from "@connectrpc/connect/protocol";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import type { RequestOrigin } from "../audit/event.js";
import { clientAddressKey, userAgentKey } from "../server/context.js";

/** Finds the server's handler for a path such as `/traitgate.identity.v1.IdentityService/Login`. */
export type HandlerLookup = (path: string) => UniversalHandler | undefined;

export function handlerLookup(handlers: readonly UniversalHandler[]): HandlerLookup {
  const byPath = new Map(handlers.map((h) => [h.requestPath, h]));
  return (path) => byPath.get(path);
}

/** The context values a call gets on this server: where the browser's request came from. */
export function callContext(origin: RequestOrigin) {
  return createContextValues()
    .set(clientAddressKey, origin.clientAddress)
    .set(userAgentKey, origin.userAgent);
}

/**
 * A Connect transport that calls this server's own handlers in process, as if the browser
 * at `origin` had called them: every interceptor (request id, authentication, API key
 * scopes, validation, audit of refusals) runs as on the network.
 */
export function inProcessTransport(lookup: HandlerLookup, origin: RequestOrigin): Transport {
  const httpClient: UniversalClientFn = async (req) => {
    const path = new URL(req.url).pathname;
    const handler = lookup(path);
    if (handler === undefined) throw new Error(`no handler for ${path}`);
    const signal = req.signal ?? new AbortController().signal;
    const serverReq: UniversalServerRequest = {
      httpVersion: "2.0",
      method: req.method,
      url: req.url,
      header: req.header,
      body: req.body ?? createAsyncIterable([]),
      signal,
      contextValues: callContext(origin),
    };
    const res = await handler(serverReq);
    return {
      status: res.status,
      header: new Headers(res.header),
      trailer: new Headers(res.trailer),
      body: res.body ?? createAsyncIterable([]),
    };
  };
  return createTransport({
    httpClient,
    baseUrl: "http://in-process",
    useBinaryFormat: true,
    interceptors: [],
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes: Number.MAX_SAFE_INTEGER,
    writeMaxBytes: Number.MAX_SAFE_INTEGER,
  });
}
