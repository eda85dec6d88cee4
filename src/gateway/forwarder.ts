import { Agent, request } from "node:http";
import { addressRefusedCode, type ConnectGuard, type Target } from "./connect-guard.js";

/**
 * Sends a gateway call to a plugin over HTTP/1.1 with a keep-alive connection
 * pool (one per forwarder), so the hop costs a request on a warm socket, not
 * a TCP handshake. The body is JSON bytes prepared by the caller. Every connection goes
 * through the connect guard: an address plugins may not be reached at is never dialled.
 */

export interface ForwardRequest {
  /** POST (gateway calls, the default) or GET (health checks: no body). */
  method?: "POST" | "GET";
  host: string;
  port: number;
  path: string;
  body: Buffer;
  /** Extra headers: request id, caller, the core's secret for the plugin. */
  headers: Record<string, string>;
  timeoutMs: number;
  /** Aborts the call when the caller goes away. */
  signal?: AbortSignal;
}

export type ForwardResult =
  | { kind: "reply"; status: number; body: Buffer; contentType: string }
  | { kind: "unreachable"; cause: string }
  /**
   * The host is, or resolves to, an address plugins may not be reached at (or, on this port,
   * the core's own listener: `core_listener`): nothing was sent.
   */
  | { kind: "refused"; addressClass: string }
  | { kind: "timeout" }
  | { kind: "too_large" }
  | { kind: "aborted" };

export interface Forwarder {
  forward(req: ForwardRequest): Promise<ForwardResult>;
  close(): void;
}

export function createForwarder(options: {
  maxReplyBytes: number;
  maxSockets?: number;
  /** Checks the address of every new connection (docs/operator-lane.md). */
  guard: ConnectGuard;
}): Forwarder {
  const agent = new Agent({
    keepAlive: true,
    maxSockets: options.maxSockets ?? 256,
    maxFreeSockets: 64,
    scheduling: "lifo",
  });
  return {
    forward(req) {
      // A caller that already left costs no request (and no socket).
      if (req.signal?.aborted) return Promise.resolve({ kind: "aborted" });
      const target = options.guard.target(req.host, req.port);
      return target instanceof Promise ? afterGuard(req, target) : send(req, target);
    },
    close: () => agent.destroy(),
  };

  /**
   * While the guard works out the core's own addresses (once per listener whose HOST is a
   * name), the call's timeout and its caller's signal hold as they do for the request itself:
   * what is left of the timeout then goes to the request.
   */
  function afterGuard(req: ForwardRequest, target: Promise<Target>): Promise<ForwardResult> {
    const started = performance.now();
    return new Promise<ForwardResult>((resolve) => {
      let settled = false;
      const settle = (result: ForwardResult | Promise<ForwardResult>) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.signal?.removeEventListener("abort", onAbort);
        resolve(result);
      };
      const onAbort = () => settle({ kind: "aborted" });
      const timer = setTimeout(() => settle({ kind: "timeout" }), req.timeoutMs);
      req.signal?.addEventListener("abort", onAbort, { once: true });
      target.then(
        (t) => {
          const left = req.timeoutMs - (performance.now() - started);
          if (left <= 0) settle({ kind: "timeout" });
          else settle(send({ ...req, timeoutMs: left }, t));
        },
        (err: unknown) =>
          settle({ kind: "unreachable", cause: err instanceof Error ? err.message : String(err) }),
      );
    });
  }

  /** Dials `target` (what the connect guard made of the host) for `req`, unless refused. */
  function send(req: ForwardRequest, target: Target): Promise<ForwardResult> {
    // The guard may have waited (for the core's own addresses): the caller may be gone.
    if (req.signal?.aborted) return Promise.resolve({ kind: "aborted" });
    if ("refused" in target) {
      return Promise.resolve({ kind: "refused", addressClass: target.refused });
    }
    return new Promise<ForwardResult>((resolve) => {
      let settled = false;
      const settle = (result: ForwardResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.signal?.removeEventListener("abort", onAbort);
        resolve(result);
      };
      const outgoing = request({
        agent,
        host: target.host,
        lookup: options.guard.lookup(req.port),
        port: req.port,
        method: req.method ?? "POST",
        path: req.path,
        headers:
          req.method === "GET"
            ? { ...req.headers, accept: "application/json" }
            : {
                ...req.headers,
                "content-type": "application/json",
                "content-length": String(req.body.length),
                accept: "application/json",
              },
      });
      // The error listener comes first: destroying a request emits `error`, and an
      // `error` event without a listener would stop the process.
      outgoing.on("error", (err: NodeJS.ErrnoException & { addressClass?: string }) =>
        settle(
          err.code === addressRefusedCode
            ? { kind: "refused", addressClass: err.addressClass ?? "" }
            : { kind: "unreachable", cause: err.code ?? err.message },
        ),
      );
      const timer = setTimeout(() => {
        settle({ kind: "timeout" });
        outgoing.destroy();
      }, req.timeoutMs);
      const onAbort = () => {
        settle({ kind: "aborted" });
        outgoing.destroy();
      };
      req.signal?.addEventListener("abort", onAbort, { once: true });
      outgoing.on("response", (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > options.maxReplyBytes) {
            settle({ kind: "too_large" });
            res.destroy();
            return;
          }
          chunks.push(chunk);
        });
        res.on("end", () =>
          settle({
            kind: "reply",
            status: res.statusCode ?? 502,
            body: chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size),
            contentType: String(res.headers["content-type"] ?? ""),
          }),
        );
        res.on("error", (err: NodeJS.ErrnoException) =>
          settle({ kind: "unreachable", cause: err.code ?? err.message }),
        );
      });
      if (req.method === "GET") outgoing.end();
      else outgoing.end(req.body);
    });
  }
}
