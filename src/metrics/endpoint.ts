import { createHash, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse, RequestListener } from "../server/app.js";
import { joinRepeatedAuthorization } from "../server/request-headers.js";
import type { MetricsSource } from "./cluster.js";
import type { MetricsConfig } from "./config.js";

/**
 * `GET /metrics` in Prometheus's text format, for whom the configuration lets read it
 * (src/metrics/config.ts): with a token, whoever sends it; public, anyone; otherwise loopback
 * clients only, and never a request relayed by a proxy (it carries a forwarding header: the
 * proxy's own clients would otherwise look like loopback). Refusals: 401 without the right
 * token, 403 for a client that is not on loopback.
 */

export type MetricsAccess = Pick<MetricsConfig, "public" | "token">;

/** 127.0.0.0/8 and ::1, also as IPv4-mapped IPv6 (::ffff:127.0.0.1). */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice(7) : address;
  return address === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

const forwardingHeaders = ["forwarded", "x-forwarded-for", "x-real-ip"];

type Refusal = { status: 401 | 403; reason: string; message: string };

/** Whether this request may read the metrics; the refusal to answer otherwise. */
export function checkMetricsAccess(
  access: MetricsAccess,
  req: Pick<NodeRequest, "headers"> & { socket?: { remoteAddress?: string | undefined } },
): Refusal | undefined {
  if (access.token !== undefined) {
    const given = /^Bearer (\S+)$/i.exec(req.headers.authorization ?? "")?.[1];
    return given !== undefined && sameSecret(given, access.token)
      ? undefined
      : {
          status: 401,
          reason: "METRICS_TOKEN_REQUIRED",
          message: "the metrics need Authorization: Bearer <METRICS_TOKEN>",
        };
  }
  if (access.public) return undefined;
  const relayed = forwardingHeaders.some((h) => req.headers[h] !== undefined);
  return isLoopbackAddress(req.socket?.remoteAddress) && !relayed
    ? undefined
    : {
        status: 403,
        reason: "METRICS_LOOPBACK_ONLY",
        message:
          "the metrics answer loopback clients only (METRICS_TOKEN or METRICS_PUBLIC: docs/operations.md)",
      };
}

/** Compares digests, so that neither the length nor the content shows in the time taken. */
function sameSecret(given: string, expected: string): boolean {
  const digest = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/** Answers one request for the metrics. */
export function createMetricsHandler(
  registry: MetricsSource,
  access: MetricsAccess,
  log: Logger,
): (req: NodeRequest, res: NodeResponse) => void {
  return (req, res) => {
    // Its own port's requests do not pass the app's listener, which does this for the rest.
    joinRepeatedAuthorization(req);
    const refusal = checkMetricsAccess(access, req);
    if (refusal !== undefined) {
      log.debug({ status: refusal.status, reason: refusal.reason }, "metrics scrape refused");
      return sendError(res, refusal);
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain" });
      res.end("GET or HEAD\n");
      return;
    }
    registry.metrics().then(
      (text) => {
        res.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" });
        if (req.method === "HEAD") res.end();
        else res.end(text);
      },
      (err: unknown) => {
        log.error({ err }, "metrics could not be collected");
        res.writeHead(500, { "content-type": "text/plain" });
        res.end("metrics could not be collected\n");
      },
    );
  };
}

function sendError(res: NodeResponse, refusal: Refusal): void {
  const code = refusal.status === 401 ? "unauthenticated" : "permission_denied";
  res.writeHead(refusal.status, {
    "content-type": "application/json",
    "cache-control": "no-store",
    ...(refusal.status === 401 ? { "www-authenticate": 'Bearer realm="metrics"' } : {}),
  });
  res.end(
    JSON.stringify({
      code,
      message: refusal.message,
      details: [
        {
          "@type": "type.googleapis.com/google.rpc.ErrorInfo",
          reason: refusal.reason,
          domain: "traitgate",
          metadata: {},
        },
      ],
    }),
  );
}

/** `/metrics` on the main port: that path goes to the metrics, every other to the app. */
export function withMetricsPath(
  app: RequestListener,
  metrics: (req: NodeRequest, res: NodeResponse) => void,
): RequestListener {
  return (req, res) => {
    const url = req.url ?? "/";
    if (url === "/metrics" || url.startsWith("/metrics?")) return metrics(req, res);
    app(req, res);
  };
}

export interface MetricsListener {
  readonly url: string;
  close(): Promise<void>;
}

/** `/metrics` on a port of its own (METRICS_PORT, METRICS_HOST); 404 for any other path. */
export async function listenForMetrics(
  metrics: (req: NodeRequest, res: NodeResponse) => void,
  options: { port: number; host: string },
): Promise<MetricsListener> {
  const server = createServer({ headersTimeout: 10_000, requestTimeout: 10_000 }, (req, res) => {
    const url = req.url ?? "/";
    if (url === "/metrics" || url.startsWith("/metrics?")) return metrics(req, res);
    res.writeHead(404, { "content-type": "text/plain" });
    res.end("not found: the metrics are at /metrics\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  const host = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
  return {
    url: `http://${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${bound.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
