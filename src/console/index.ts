import { Code } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import type { RequestOrigin } from "../audit/event.js";
import type { AuditWriter } from "../audit/index.js";
import { createSecretBox, type DataKeys } from "../crypto/secret-box.js";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse, RequestListener } from "../server/app.js";
import type { ApiKeyVerifier } from "../server/interceptors.js";
import { createOriginResolver, parseTrustedProxies } from "../server/origin.js";
import type { Database } from "../storage/index.js";
import { createConsoleApi } from "./api.js";
import { consoleClients } from "./clients.js";
import { cookieName, csrfRefusal, readCookie, securityHeaders, sendJson } from "./http.js";
import { handlerLookup } from "./in-process.js";
import { createRpcProxy, rpcPrefix, sendConnectError } from "./rpc-proxy.js";
import { createConsoleSessionStore } from "./session-store.js";
import { createConsoleSessions } from "./sessions.js";
import { createSignIn } from "./sign-in.js";
import { createStaticFiles, defaultAssetsDir } from "./static.js";

export interface ConsoleDeps {
  db: Database;
  /** The server's handlers (createApp): the console calls the services through them. */
  handlers: readonly UniversalHandler[];
  apiKeys: ApiKeyVerifier;
  audit: Pick<AuditWriter, "write">;
  log: Logger;
  dataKeys: DataKeys;
  /** The port speaks TLS: the cookie is `__Host-` and Secure. */
  tls: boolean;
  /** A session unused this long ends (CONSOLE_IDLE_TIMEOUT_SECONDS). */
  idleTimeoutSeconds: number;
  /** Where the built bundle is (default dist/console of this package). */
  assetsDir?: string;
  /** Where a request came from (default: the TCP peer, no trusted proxies). */
  originOf?: (req: NodeRequest) => RequestOrigin;
  now?: () => number;
}

/**
 * The admin console (docs/console.md): its page and assets at `/console/`, its sign-in API at
 * `/console/api/`, and the services at `/console/rpc/`, behind an HttpOnly session cookie.
 * Returns a listener that answers those paths (and redirects browsers from `/`) and hands
 * everything else to `next`.
 */
export function withConsole(next: RequestListener, deps: ConsoleDeps): RequestListener {
  const log = deps.log.child({ area: "console" });
  const lookup = handlerLookup(deps.handlers);
  const name = cookieName(deps.tls);
  const originOf = deps.originOf ?? createOriginResolver(parseTrustedProxies([]).proxies);
  const refreshClients = (origin: RequestOrigin) => consoleClients(lookup, origin);
  const sessions = createConsoleSessions({
    store: createConsoleSessionStore(deps.db),
    box: createSecretBox(deps.dataKeys),
    log,
    idleTimeoutSeconds: deps.idleTimeoutSeconds,
    ...(deps.now ? { now: deps.now } : {}),
    refresh: async (refreshToken, address) => {
      // The session's address; the refresh is the console's own doing, not the browser's.
      const res = await refreshClients({ clientAddress: address, userAgent: "" }).identity.refresh({
        refreshToken,
      });
      return {
        access: res.token,
        refresh: res.refreshToken,
        accessExpiresAt: (deps.now ?? Date.now)() + res.expiresIn * 1000,
      };
    },
  });
  const signIn = createSignIn({
    sessions,
    clients: refreshClients,
    apiKeys: deps.apiKeys,
    audit: deps.audit,
    log,
    ...(deps.now ? { now: deps.now } : {}),
  });
  const api = createConsoleApi({
    signIn,
    sessions,
    cookieName: name,
    tls: deps.tls,
    log,
    originOf,
  });
  const rpc = createRpcProxy({
    lookup,
    audit: deps.audit,
    sessions,
    cookieName: name,
    tls: deps.tls,
    log,
    originOf,
  });
  const files = createStaticFiles(deps.assetsDir ?? defaultAssetsDir());

  async function serve(req: NodeRequest, res: NodeResponse, path: string): Promise<void> {
    const isRpc = path.startsWith(`${rpcPrefix}/`);
    if (isRpc || path.startsWith("/console/api/")) {
      const refusal = csrfRefusal(req, deps.tls);
      if (refusal !== undefined) {
        log.info(
          { event: "console_csrf_refused", reason: refusal, rpc: isRpc },
          "console request refused",
        );
        // Nothing of the request is read: its cookie is not even looked at.
        if (isRpc)
          sendConnectError(res, Code.PermissionDenied, refusal, "cross-site request refused");
        else
          sendJson(res, 403, {
            code: "permission_denied",
            reason: refusal,
            message: "cross-site request refused",
            field: "",
          });
        req.resume();
        return;
      }
      const session = await sessions.load(readCookie(req, name));
      if (isRpc) await rpc(req, res, path, session);
      else await api(req, res, path, session);
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { ...securityHeaders, allow: "GET, HEAD" });
      res.end();
      return;
    }
    await files(res, path);
  }

  return (req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0] ?? "/";
    if (path === "/console" || path.startsWith("/console/")) {
      serve(req, res, path).catch((err: unknown) => {
        log.error({ err }, "console request failed");
        if (!res.headersSent) {
          res.writeHead(500, { ...securityHeaders, "content-type": "text/plain; charset=utf-8" });
        }
        res.end();
      });
      return;
    }
    if (path === "/" && req.method === "GET" && (req.headers.accept ?? "").includes("text/html")) {
      res.writeHead(302, { ...securityHeaders, location: "/console/" });
      res.end();
      return;
    }
    next(req, res);
  };
}
