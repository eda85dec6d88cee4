import type { HandlerContext } from "@connectrpc/connect";

/**
 * Marks the answer of a call as one no cache may keep: answers that carry a token, a secret or
 * recovery codes (RFC 6749 §5.1: `Cache-Control: no-store` and `Pragma: no-cache`, the latter
 * for HTTP/1.0 caches). Handlers call it first, so an error answer is marked too. The headers
 * reach every protocol: Connect and gRPC-Web through Connect's handler, REST through the
 * transcoder and gRPC through its unary path, both of which send the handler's headers.
 * test/integration/no-store.test.ts finds in the protos which methods need it.
 */
export function noStore(ctx: Pick<HandlerContext, "responseHeader">): void {
  ctx.responseHeader.set("cache-control", "no-store");
  ctx.responseHeader.set("pragma", "no-cache");
}
