import type { RequestOrigin } from "../audit/event.js";
import { invalidArgument, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse } from "../server/app.js";
import { consoleAccess } from "./access.js";
import { clearedCookie, readJson, sendError, sendJson, sessionCookie } from "./http.js";
import { type ConsoleSession, type ConsoleSessions, endsSession } from "./sessions.js";
import type { SignIn } from "./sign-in.js";

export interface ConsoleApiDeps {
  signIn: SignIn;
  sessions: ConsoleSessions;
  cookieName: string;
  tls: boolean;
  log: Logger;
  /** Where a request came from, as the server resolves it (TRUSTED_PROXIES). */
  originOf: (req: NodeRequest) => RequestOrigin;
}

const text = (body: Record<string, unknown>, name: string): string => {
  const value = body[name] ?? "";
  if (typeof value !== "string" || value.length > 1024) {
    throw invalidArgument("INVALID_FIELD", `${name} must be a string`, { field: name });
  }
  return value;
};

/**
 * The console's own JSON API under `/console/api/`: the sign-in steps, the session, sign-out.
 * (Everything else goes to the services through `/console/rpc/`.)
 */
export function createConsoleApi(deps: ConsoleApiDeps) {
  const { signIn, sessions, log } = deps;
  const setCookie = (value: string) => ({
    "set-cookie": sessionCookie(deps.cookieName, value, deps.tls),
  });
  const clear = { "set-cookie": clearedCookie(deps.cookieName, deps.tls) };

  /** What the browser may know of its session: never a token or a key. */
  async function describe(session: ConsoleSession, origin: RequestOrigin) {
    let { features, policyVersion } = session;
    if (session.stage === "active") {
      // Asked afresh on each shell load; a revoked login fails here and ends the session.
      const secrets = await sessions.fresh(session);
      ({ features, policyVersion } = await signIn.features(session, secrets, origin));
      await sessions.update(session, { features, policyVersion });
    }
    const access = consoleAccess(features, session.roles);
    return {
      stage: session.stage,
      user: { id: session.userId, username: session.username, roles: session.roles },
      mfa: session.mfa,
      access: access.kind,
      pages: access.pages,
      features,
      policy_version: policyVersion,
      api_key:
        session.apiKeyId === null ? null : { id: session.apiKeyId, scopes: session.apiKeyScopes },
      idle_timeout_seconds: sessions.idleTimeoutSeconds,
    };
  }

  return async (
    req: NodeRequest,
    res: NodeResponse,
    path: string,
    session: ConsoleSession | undefined,
  ): Promise<void> => {
    const origin = deps.originOf(req);
    try {
      const body = await readJson(req, 16 * 1024);
      if (body === undefined)
        throw invalidArgument("MALFORMED_JSON", "the body must be a JSON object");
      switch (path) {
        case "/console/api/sign-in": {
          const step = await signIn.password(
            {
              username: text(body, "username"),
              password: text(body, "password"),
              totpCode: text(body, "totp_code"),
            },
            origin,
          );
          if (step.step === "mfa") return sendJson(res, 200, { step: "mfa" });
          if (step.step === "enrol") {
            return sendJson(
              res,
              200,
              { step: "enrol", secret: step.secret, otpauth_uri: step.otpauthUri },
              setCookie(step.cookie),
            );
          }
          return sendJson(res, 200, { step: step.step }, setCookie(step.cookie));
        }
        case "/console/api/mfa/activate": {
          if (session === undefined) throw unauthenticated("CONSOLE_SESSION", "sign in again");
          const { recoveryCodes } = await signIn.activateMfa(session, text(body, "code"), origin);
          return sendJson(res, 200, { step: "signed_out", recovery_codes: recoveryCodes }, clear);
        }
        case "/console/api/api-key": {
          if (session === undefined) throw unauthenticated("CONSOLE_SESSION", "sign in again");
          await signIn.apiKey(session, text(body, "api_key"), origin);
          return sendJson(res, 200, { step: "ready" });
        }
        case "/console/api/session": {
          if (session === undefined) {
            return sendJson(res, 200, { stage: "signed_out" }, clear);
          }
          try {
            return sendJson(res, 200, await describe(session, origin));
          } catch (err) {
            if (!endsSession(err)) throw err;
            await sessions.end(session.idHash);
            log.info(
              { event: "console_session_ended", user_id: session.userId },
              "console session ended: its login is no longer valid",
            );
            return sendJson(res, 200, { stage: "signed_out", ended: true }, clear);
          }
        }
        case "/console/api/sign-out": {
          if (session !== undefined) await signIn.signOut(session, origin);
          return sendJson(res, 200, { stage: "signed_out" }, clear);
        }
        default:
          return sendJson(res, 404, {
            code: "not_found",
            reason: "NOT_FOUND",
            message: "no such console call",
            field: "",
          });
      }
    } catch (err) {
      sendError(res, err, log);
    }
  };
}
