import { cors as connectCors } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import type { LiveSettings } from "../settings/live.js";
import { parseOriginList } from "../settings/origin-list.js";
import type { NodeRequest, NodeResponse } from "./app.js";
import { parsePathTemplate } from "./transcoder/path-template.js";
import { RouteTrie } from "./transcoder/route-trie.js";

/**
 * Cross-origin resource sharing for browser clients served from other origins (docs/api.md,
 * "CORS"), off until `http.cors_allowed_origins` lists origins:
 *
 * - a preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from a listed
 *   origin is answered here, 204, with the methods of the path (an RPC path: its handler's,
 *   POST and, for side-effect-free methods, Connect's GET; a REST path: its routes'), the
 *   request headers Connect, gRPC-Web and the API use, and a max age; from any other origin
 *   it is refused, 403 without CORS headers, so the browser does not send the request;
 * - other requests from a listed origin are served with `Access-Control-Allow-Origin` (that
 *   origin) and the response headers scripts may read; from other origins, without them.
 *
 * Credentials are bearer tokens and API keys in headers, never cookies: no
 * `Access-Control-Allow-Credentials`. The console (`/console/`) is same-origin and its
 * listener answers before this one; its paths never get CORS headers.
 */

export const corsSettingKey = "http.cors_allowed_origins";

/** How long a browser may keep a preflight's answer (Chromium caps it at 2 hours). */
export const corsMaxAgeSeconds = 7200;

const lowerUnique = (names: readonly string[]) =>
  [...new Set(names.map((n) => n.toLowerCase()))].join(", ");

/** Request headers browser clients may send: Connect's and gRPC-Web's, and the API's own. */
export const corsAllowedHeaders = lowerUnique([
  ...connectCors.allowedHeaders,
  "authorization",
  "x-api-key",
  "x-request-id",
  "if-match",
]);

/** Response headers scripts may read: the gRPC-Web status and details, and the API's own. */
export const corsExposedHeaders = lowerUnique([
  ...connectCors.exposedHeaders,
  "etag",
  "retry-after",
  "x-request-id",
]);

/** Paths that are neither an RPC nor a REST route (/openapi.json, probes): documents. */
const documentMethods = "GET, HEAD";

/** What the step did: answered a preflight (allowed or refused), or let the request go on. */
export type CorsOutcome = "preflight_allowed" | "preflight_refused" | undefined;

export interface CorsOptions {
  /** The listed origins, already compiled (followCorsOrigins); empty = CORS off. */
  allowedOrigins: () => ReadonlySet<string>;
  /** The router's handlers: RPC paths and the HTTP methods each accepts. */
  rpcHandlers: readonly UniversalHandler[];
  /** The REST routes (listRestRoutes). */
  restRoutes: readonly { method: string; template: string }[];
}

/** The CORS step of the listener: call it before serving; it answers preflights itself. */
export function createCors(
  options: CorsOptions,
): (req: NodeRequest, res: NodeResponse, path: string) => CorsOutcome {
  const rpcMethods = new Map(
    options.rpcHandlers.map((h) => [h.requestPath, h.allowedMethods.join(", ")]),
  );
  const rest = new RouteTrie<object>();
  for (const r of options.restRoutes) rest.add(parsePathTemplate(r.template), r.method, {});

  const methodsOf = (path: string): string => {
    const rpc = rpcMethods.get(path);
    if (rpc !== undefined) return rpc;
    // OPTIONS is no route's method: a REST path answers with the methods it has.
    const match = rest.match(path, "OPTIONS");
    return match.kind === "method_not_allowed" ? match.allowed.join(", ") : documentMethods;
  };

  return (req, res, path) => {
    const origins = options.allowedOrigins();
    if (origins.size === 0 || path === "/console" || path.startsWith("/console/")) return;
    const origin = req.headers.origin;
    const allowed = origin !== undefined && origins.has(origin);
    const preflight =
      req.method === "OPTIONS" &&
      origin !== undefined &&
      req.headers["access-control-request-method"] !== undefined;
    if (!preflight) {
      // The answer depends on Origin whenever CORS is on: caches must keep one per origin.
      res.setHeader("vary", "Origin");
      if (allowed) {
        res.setHeader("access-control-allow-origin", origin);
        res.setHeader("access-control-expose-headers", corsExposedHeaders);
      }
      return;
    }
    const vary = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";
    if (!allowed) {
      const body = JSON.stringify({
        code: "permission_denied",
        message: `cross-origin requests from this origin are not allowed (${corsSettingKey})`,
        details: [
          {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            reason: "CORS_ORIGIN_NOT_ALLOWED",
            domain: "traitgate",
            metadata: { field: "Origin" },
          },
        ],
      });
      res.writeHead(403, {
        vary,
        "content-type": "application/json",
        "content-length": String(Buffer.byteLength(body)),
        "cache-control": "no-store",
      });
      res.end(body);
      return "preflight_refused";
    }
    res.writeHead(204, {
      vary,
      "access-control-allow-origin": origin,
      "access-control-allow-methods": methodsOf(path),
      "access-control-allow-headers": corsAllowedHeaders,
      "access-control-max-age": String(corsMaxAgeSeconds),
    });
    res.end();
    return "preflight_allowed";
  };
}

/**
 * The origins `http.cors_allowed_origins` lists, compiled into a set now and again after
 * each change of the setting (on every process: live settings), so that a request costs one
 * lookup. Returns the set's reader and the function that stops following.
 */
export function followCorsOrigins(live: Pick<LiveSettings, "current" | "subscribe">): {
  allowedOrigins: () => ReadonlySet<string>;
  stop: () => void;
} {
  const compile = (value: unknown): ReadonlySet<string> =>
    new Set(typeof value === "string" ? parseOriginList(value).origins : []);
  let origins = compile(live.current().values[corsSettingKey]);
  const stop = live.subscribe((settings, changed) => {
    if (changed.includes(corsSettingKey)) origins = compile(settings.values[corsSettingKey]);
  });
  return { allowedOrigins: () => origins, stop };
}
