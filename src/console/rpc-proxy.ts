import { randomUUID } from "node:crypto";
import { create, type DescMethod } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorToJson } from "@connectrpc/connect/protocol-connect";
import {
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { RequestOrigin } from "../audit/event.js";
import type { AuditWriter } from "../audit/index.js";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse } from "../server/app.js";
import { errorDomain } from "../server/error-boundary.js";
import { httpStatusOf } from "../server/http-status.js";
import { consoleAccess, consoleMayCall } from "./access.js";
import { clearedCookie, securityHeaders, setSecurityHeaders } from "./http.js";
import { callContext, type HandlerLookup } from "./in-process.js";
import { type ConsoleSession, type ConsoleSessions, endsSession } from "./sessions.js";

export const rpcPrefix = "/console/rpc";

/** Reads (declared free of side effects, or named as reads) are not recorded as console calls. */
const mayChange = (method: DescMethod) =>
  method.idempotency !== MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS &&
  !/^(Get|List|Watch|Check)/.test(method.name);

/** Calls after whose success the console session is over (the login session is, too). */
const endingCalls = new Set([
  "traitgate.identity.v1.IdentityService/Logout",
  "traitgate.identity.v1.IdentityService/LogoutAll",
  "traitgate.identity.v1.IdentityService/ChangePassword",
]);

export interface RpcProxyDeps {
  lookup: HandlerLookup;
  audit: Pick<AuditWriter, "write">;
  sessions: ConsoleSessions;
  cookieName: string;
  tls: boolean;
  log: Logger;
  /** Where a request came from, as the server resolves it (TRUSTED_PROXIES). */
  originOf: (req: NodeRequest) => RequestOrigin;
}

/** A Connect error answered by the console itself, in the Connect protocol's JSON form. */
export function sendConnectError(
  res: NodeResponse,
  code: Code,
  reason: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  const error = new ConnectError(message, code, undefined, [
    {
      desc: ErrorInfoSchema,
      value: create(ErrorInfoSchema, { reason, domain: errorDomain, metadata: {} }),
    },
  ]);
  res.writeHead(httpStatusOf(code), {
    ...securityHeaders,
    "content-type": "application/json",
    "cache-control": "no-store",
    ...headers,
  });
  res.end(JSON.stringify(errorToJson(error, undefined)));
}

/**
 * `/console/rpc/<package.Service>/<Method>`: the browser's Connect calls, answered by the same
 * handlers as every other protocol. The session cookie is swapped for the session's bearer
 * token and API key (the browser never holds them); a 401 from the service ends the session.
 */
export function createRpcProxy(deps: RpcProxyDeps) {
  const { lookup, sessions, log } = deps;
  const ended = {
    "x-console-session": "ended",
    "set-cookie": clearedCookie(deps.cookieName, deps.tls),
  };

  /**
   * A call that may change something, made through the console: who, which call, from which
   * address, and how it ended (the service records what changed, under the same request id).
   */
  async function recordCall(
    session: ConsoleSession,
    rpc: string,
    requestId: string,
    status: number,
    origin: RequestOrigin,
  ): Promise<void> {
    const outcome =
      status === 200
        ? "success"
        : status === 401 || status === 403
          ? "denied"
          : status >= 500
            ? "error"
            : "failure";
    await deps.audit
      .write({
        actorType: "user",
        actorId: session.userId,
        action: "console_call",
        target: rpc,
        outcome,
        requestId,
        origin,
        details: { http_status: status },
      })
      .catch((err: unknown) => log.error({ err, rpc }, "could not record a console call"));
  }

  return async (
    req: NodeRequest,
    res: NodeResponse,
    path: string,
    session: ConsoleSession | undefined,
  ) => {
    const rpc = path.slice(rpcPrefix.length + 1);
    const handler = lookup(`/${rpc}`);
    if (handler === undefined) {
      sendConnectError(res, Code.Unimplemented, "UNIMPLEMENTED", `unknown method ${rpc}`);
      return;
    }
    if (session === undefined || session.stage !== "active") {
      sendConnectError(
        res,
        Code.Unauthenticated,
        "CONSOLE_SESSION",
        "sign in to the console",
        ended,
      );
      return;
    }
    if (!consoleMayCall(rpc, consoleAccess(session.features, session.roles))) {
      sendConnectError(
        res,
        Code.PermissionDenied,
        "CONSOLE_PAGE",
        "the console does not offer this call to you (the policy's UI features)",
      );
      return;
    }
    let secrets: Awaited<ReturnType<ConsoleSessions["fresh"]>>;
    try {
      secrets = await sessions.fresh(session);
    } catch (err) {
      if (!endsSession(err)) {
        log.warn({ err, user_id: session.userId }, "console session token not renewed");
        sendConnectError(
          res,
          Code.Unavailable,
          "CONSOLE_UNAVAILABLE",
          "the session's token could not be renewed just now; try again",
        );
        return;
      }
      log.info(
        { event: "console_session_ended", user_id: session.userId, cause: "refresh" },
        "console session ended",
      );
      await sessions.end(session.idHash);
      sendConnectError(
        res,
        Code.Unauthenticated,
        "CONSOLE_SESSION",
        "the session ended: sign in again",
        ended,
      );
      return;
    }
    const origin = deps.originOf(req);
    const uReq = universalRequestFromNodeRequest(req, res, undefined, callContext(origin));
    uReq.header.delete("cookie");
    uReq.header.set("authorization", `Bearer ${secrets.access}`);
    if (secrets.apiKey) uReq.header.set("x-api-key", secrets.apiKey);
    else uReq.header.delete("x-api-key");
    uReq.url = uReq.url.replace(rpcPrefix, "");
    // One request id for the service's own audit event and the console's record of the call.
    const requestId = randomUUID();
    uReq.header.set("x-request-id", requestId);
    const uRes = await handler(uReq);
    if (mayChange(handler.method)) {
      await recordCall(session, rpc, requestId, uRes.status, origin);
    }
    if (uRes.status === 401) {
      // The token or the key is no longer good (revoked, user deactivated, password changed).
      await sessions.end(session.idHash);
      uRes.header = new Headers(uRes.header);
      for (const [k, v] of Object.entries(ended)) uRes.header.set(k, v);
    } else if (uRes.status === 200 && endingCalls.has(rpc)) {
      await sessions.end(session.idHash);
      uRes.header = new Headers(uRes.header);
      for (const [k, v] of Object.entries(ended)) uRes.header.set(k, v);
    }
    setSecurityHeaders(res);
    res.setHeader("cache-control", "no-store");
    await universalResponseToNodeResponse(uRes, res);
  };
}
