import { randomUUID } from "node:crypto";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import { permissionDenied } from "../errors.js";
import type { AuthenticatedUser } from "../identity/identity.js";
import type { Logger } from "../log.js";
import { loggerKey, type Principal, principalKey, requestIdKey } from "./context.js";
import { toConnectError } from "./error-boundary.js";

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * A child logger made on first use. Most calls log nothing at the configured
 * level, and making a pino child (its bindings pass the redaction rules) is a
 * measurable part of a small request's cost.
 */
function lazyChild(root: Logger, bindings: Record<string, string>): Logger {
  let child: Logger | undefined;
  return new Proxy(root, {
    get(_target, property) {
      child ??= root.child(bindings);
      const value: unknown = Reflect.get(child, property, child);
      return typeof value === "function" ? value.bind(child) : value;
    },
  });
}

/**
 * Outermost interceptor: request id (taken from `x-request-id` when sane,
 * generated otherwise, echoed back), a child logger, one access log line per
 * call, and the error boundary, so that even errors of inner interceptors are
 * mapped in one place.
 */
export function createRequestInterceptor(root: Logger): Interceptor {
  return (next) => async (req) => {
    const incoming = req.header.get("x-request-id");
    const requestId =
      incoming !== null && requestIdPattern.test(incoming) ? incoming : randomUUID();
    const rpc = `${req.service.typeName}/${req.method.name}`;
    const log = lazyChild(root, { request_id: requestId, rpc });
    req.contextValues.set(requestIdKey, requestId);
    req.contextValues.set(loggerKey, log);
    const started = performance.now();
    try {
      const res = await next(req);
      res.header.set("x-request-id", requestId);
      if (root.isLevelEnabled("debug")) {
        log.debug({ code: "ok", duration_ms: +(performance.now() - started).toFixed(3) }, "rpc");
      }
      return res;
    } catch (err) {
      const error = toConnectError(err, log);
      error.metadata.set("x-request-id", requestId);
      log.info(
        {
          code: ConnectError.from(error).code,
          duration_ms: +(performance.now() - started).toFixed(3),
        },
        "rpc failed",
      );
      throw error;
    }
  };
}

/** How a method is protected. Methods without a rule require authentication (fail closed). */
export type AuthRule =
  | { public: true }
  | {
      public: false;
      roles: readonly string[];
      /** Also accept enrolment-only tokens (MFA_REQUIRED), for the MFA enrolment calls. */
      allowMfaEnrollment?: boolean;
    };

export const publicMethod: AuthRule = { public: true };

/** A method callable by any authenticated user holding at least one of `roles` (any user when empty). */
export function requireAuth(options: { roles?: readonly string[] } = {}): AuthRule {
  return { public: false, roles: options.roles ?? [] };
}

export interface Authenticator {
  authenticate(
    authorization: string | null,
    options?: { allowMfaEnrollment?: boolean },
  ): Promise<AuthenticatedUser>;
}

/**
 * Authenticates every call whose method is not public, and checks its roles.
 * `rules` is keyed by "<package.Service>/<Method>".
 */
export function createAuthInterceptor(
  authenticator: Authenticator,
  rules: ReadonlyMap<string, AuthRule>,
): Interceptor {
  const anyUser = requireAuth();
  return (next) => async (req) => {
    const rule = rules.get(`${req.service.typeName}/${req.method.name}`) ?? anyUser;
    if (rule.public) return next(req);
    const user = await authenticator.authenticate(req.header.get("authorization"), {
      allowMfaEnrollment: rule.allowMfaEnrollment === true,
    });
    if (rule.roles.length > 0 && !rule.roles.some((r) => user.roles.includes(r))) {
      throw permissionDenied("ROLE", `this call needs one of the roles: ${rule.roles.join(", ")}`);
    }
    const principal: Principal = { ...user };
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}
