import { Code } from "@connectrpc/connect";
import { DomainError } from "../errors.js";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse } from "./app.js";
import type { CallRecord } from "./context.js";
import { kindOfCode, reasonOfCode } from "./error-boundary.js";
import { codeName, httpStatusOf } from "./http-status.js";
import type { Authenticator, AuthRule, RefusedCall } from "./interceptors.js";

/**
 * What happens once a call has ended (its answer is sent, or its client is gone):
 *
 * - its **access log line**, exactly one per request, at info (warn when a dependency is
 *   unavailable or too slow, error for a fault of the server): who called (principal type
 *   and id, API key id, client address), what (rpc, REST route, protocol), the request id,
 *   and the outcome (Connect code, HTTP status, ErrorInfo reason, duration). Never anything
 *   the request or the answer carried.
 * - for a call **refused before its method ran** other than by the auth interceptor (which
 *   reports its own refusals), a report to the `onRefused` hook of the module that owns the
 *   method, so that the gateway's calls leave one operator_call event whatever refused them.
 */

type Hook = (call: RefusedCall) => Promise<void>;
type ProtectedRule = Extract<AuthRule, { public: false }>;

export interface CallEndOptions {
  log: Logger;
  /** The modules' own `onRefused` hooks, by service type name. */
  refusalHooks: ReadonlyMap<string, Hook>;
  /** How each method is protected (methods without a rule need authentication). */
  authRules: ReadonlyMap<string, AuthRule>;
  /** Tells who sent a refused call (its credential), when the auth interceptor did not run. */
  authenticator: Authenticator;
  /** Told of every call with its access line: its record, outcome code and duration (metrics). */
  onCallEnded?: (call: CallRecord, code: number, seconds: number) => void;
}

/** The level of a call's line: warn for what a dependency did, error for a server fault. */
function levelOf(code: number): "info" | "warn" | "error" {
  if (code === Code.Internal || code === Code.Unknown || code === Code.DataLoss) return "error";
  if (code === Code.Unavailable || code === Code.DeadlineExceeded) return "warn";
  return "info";
}

export function createCallEnd(
  options: CallEndOptions,
): (call: CallRecord, req: NodeRequest, res: NodeResponse) => Promise<void> {
  const { log, refusalHooks, authRules, authenticator, onCallEnded } = options;

  /** The hook to tell of this call, if it was refused before its method ran and nobody else told one. */
  function hookFor(
    call: CallRecord,
    code: number,
  ): { hook: Hook; rule: ProtectedRule } | undefined {
    if (call.rpc === undefined || call.handled || call.refusalReported || code === 0) return;
    const hook = refusalHooks.get(call.rpc.slice(0, call.rpc.indexOf("/")));
    const rule = authRules.get(call.rpc) ?? { public: false, roles: [] };
    return hook === undefined || rule.public ? undefined : { hook, rule };
  }

  /** Who sent a call the auth interceptor did not see: its credential, if valid. */
  async function identify(req: NodeRequest, rule: ProtectedRule) {
    const authorization = req.headers.authorization;
    if (typeof authorization !== "string") return undefined;
    return authenticator
      .authenticate(authorization, { allowMfaEnrollment: rule.allowMfaEnrollment === true })
      .catch(() => undefined);
  }

  return async (call, req, res) => {
    // An answer that never went out: the client went away first.
    const sent = res.headersSent;
    if (!sent && (call.code === undefined || call.code === 0)) call.code = Code.Canceled;
    const code = call.code ?? Code.Unknown;
    const httpStatus = sent ? res.statusCode : 499;
    const refused = hookFor(call, code);
    const durationMs = performance.now() - call.started;
    try {
      if (refused !== undefined) call.caller ??= await identify(req, refused.rule);
      log[levelOf(code)](
        {
          request_id: call.requestId,
          protocol: call.protocol,
          rpc: call.rpc,
          route: call.route,
          principal_type: call.caller?.kind ?? "anonymous",
          principal_id: call.caller?.userId,
          api_key_id: call.apiKeyId,
          client_address: call.clientAddress,
          peer_address: call.peerAddress,
          code: code === 0 ? "ok" : codeName(code),
          http_status: httpStatus,
          reason: code === 0 ? undefined : call.reason,
          duration_ms: +durationMs.toFixed(3),
        },
        "call",
      );
      onCallEnded?.(call, code, durationMs / 1000);
      if (refused === undefined) return;
      await refused.hook({
        stage: "before_handler",
        rpc: call.rpc ?? "",
        rule: refused.rule,
        requestId: call.requestId,
        clientAddress: call.clientAddress,
        userAgent: call.userAgent,
        ...(call.caller ? { caller: call.caller } : {}),
        ...(call.apiKeyId ? { apiKeyId: call.apiKeyId } : {}),
        message: call.message,
        error: new DomainError(
          kindOfCode(code),
          call.reason ?? reasonOfCode[code as Code] ?? "ERROR",
          "refused before the method ran",
        ),
        status: call.protocol === "rest" ? httpStatus : httpStatusOf(code),
      });
    } catch (err) {
      log.error(
        { err, request_id: call.requestId, rpc: call.rpc },
        "a refused call could not be recorded",
      );
    }
  };
}
