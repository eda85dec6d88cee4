import type { Interceptor } from "@connectrpc/connect";
import { DomainError, permissionDenied, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import { noteError, noteOutcome, requestIdOf } from "./call-record.js";
import {
  callRecordKey,
  clientAddressKey,
  loggerKey,
  type Principal,
  principalKey,
  requestIdKey,
  userAgentKey,
} from "./context.js";
import { toConnectError } from "./error-boundary.js";

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
 * Outermost interceptor: the request id (the call record's, see src/server/call-record.ts;
 * else taken from `x-request-id` when sane or generated), echoed back; a child logger; the
 * error boundary, so that even errors of inner interceptors are mapped in one place; and
 * the call's outcome in its record, for the access log line written when the call ends
 * (src/server/call-end.ts). Server streams are followed to their end.
 */
export function createRequestInterceptor(root: Logger): Interceptor {
  return (next) => async (req) => {
    const call = req.contextValues.get(callRecordKey);
    const requestId = call?.requestId ?? requestIdOf(req.header.get("x-request-id"));
    const rpc = `${req.service.typeName}/${req.method.name}`;
    const log = lazyChild(root, { request_id: requestId, rpc });
    req.contextValues.set(requestIdKey, requestId);
    req.contextValues.set(loggerKey, log);
    if (call !== undefined) {
      call.rpc = rpc;
      call.message = req.stream ? undefined : req.message;
    }
    const fail = (err: unknown) => {
      const error = toConnectError(err, log);
      error.metadata.set("x-request-id", requestId);
      noteError(call, error);
      return error;
    };
    try {
      const res = await next(req);
      res.header.set("x-request-id", requestId);
      if (!res.stream) {
        noteOutcome(call, 0);
        return res;
      }
      const messages = res.message;
      return {
        ...res,
        message: (async function* () {
          try {
            yield* messages;
            noteOutcome(call, 0);
          } catch (err) {
            throw fail(err);
          }
        })(),
      };
    } catch (err) {
      throw fail(err);
    }
  };
}

/** How a method is protected. Methods without a rule require authentication (fail closed). */
export type AuthRule =
  | {
      public: true;
      /**
       * The method reads a bearer token without requiring one (Validate reports on it): the
       * OpenAPI document lists the bearer scheme as optional so that clients send it.
       */
      readsBearer?: boolean;
    }
  | {
      public: false;
      roles: readonly string[];
      /**
       * The call also needs an `X-API-Key` whose scopes include every one of these
       * (administrative APIs: a token AND a scoped key).
       */
      apiKeyScopes?: readonly string[];
      /** Also accept enrolment-only tokens (MFA_REQUIRED), for the MFA enrolment calls. */
      allowMfaEnrollment?: boolean;
    };

export const publicMethod: AuthRule = { public: true };

/**
 * A method callable by any authenticated caller holding at least one of `roles`
 * (anyone authenticated when empty) and, with `apiKeyScopes`, an API key with all of them.
 */
export function requireAuth(
  options: { roles?: readonly string[]; apiKeyScopes?: readonly string[] } = {},
): AuthRule {
  return {
    public: false,
    roles: options.roles ?? [],
    ...(options.apiKeyScopes ? { apiKeyScopes: options.apiKeyScopes } : {}),
  };
}

/** Who a valid bearer token belongs to. */
export interface AuthenticatedCaller {
  kind: "user" | "service" | "plugin";
  userId: string;
  username: string;
  roles: readonly string[];
  sessionId: string;
}

export interface Authenticator {
  /** Throws an `unauthenticated` DomainError when the token is missing or not valid. */
  authenticate(
    authorization: string | null,
    options?: { allowMfaEnrollment?: boolean },
  ): Promise<AuthenticatedCaller>;
}

/** An API key as checked: what it may do and until when (null: no expiry). */
export interface VerifiedApiKey {
  id: string;
  scopes: readonly string[];
  expiresAt?: Date | null;
}

/** Checks an `X-API-Key` value. */
export interface ApiKeyVerifier {
  /**
   * The key's id and scopes; throws an `unauthenticated` DomainError (reason
   * API_KEY_INVALID) when the key is unknown, revoked or expired.
   */
  verify(key: string): Promise<VerifiedApiKey>;
}

/** A call refused before its method ran, for the audit trail. */
export interface RefusedCall {
  /**
   * "auth": by authentication or authorisation (this interceptor), reported before the
   * refusal is answered. "before_handler": anywhere else before the method ran (the
   * transport: a body too large, not JSON or malformed; validation; a credential that could
   * not be checked), reported once the call has ended, and only to the hook of the module
   * that owns the method (src/server/call-end.ts).
   */
  stage: "auth" | "before_handler";
  rpc: string;
  /** The rule the call failed. */
  rule: Extract<AuthRule, { public: false }>;
  requestId: string;
  /** The client's address and User-Agent (src/server/origin.ts). */
  clientAddress: string;
  userAgent: string;
  /** The caller when the token was valid (refused for a role or a key). */
  caller?: AuthenticatedCaller;
  apiKeyId?: string;
  /**
   * The request message of a unary call (its fields as parsed), else undefined; for a REST
   * call refused before its body was read, what its path says.
   */
  message: unknown;
  error: DomainError;
  /** The HTTP status the caller got (REST), or the one of its code; known at stage "before_handler". */
  status?: number;
}

export interface AuthInterceptorOptions {
  authenticator: Authenticator;
  /** Keyed by "<package.Service>/<Method>". */
  rules: ReadonlyMap<string, AuthRule>;
  /** Needed as soon as a rule asks for API key scopes; without it such calls are refused. */
  apiKeys?: ApiKeyVerifier;
  /**
   * Told of every refused call to a protected method before the refusal is
   * answered; when it throws, the caller gets that error instead (the refusal
   * must not go unrecorded).
   */
  onRefused?: (call: RefusedCall) => Promise<void>;
}

/**
 * Authenticates every call whose method is not public, then checks, in this
 * order: the API key (401 when missing or not valid), the roles (403 ROLE),
 * the key's scopes (403 API_KEY_SCOPE).
 */
export function createAuthInterceptor(options: AuthInterceptorOptions): Interceptor {
  const { authenticator, rules, apiKeys, onRefused } = options;
  const anyCaller = requireAuth();
  return (next) => async (req) => {
    const rpc = `${req.service.typeName}/${req.method.name}`;
    const rule = rules.get(rpc) ?? anyCaller;
    if (rule.public) return next(req);
    const call = req.contextValues.get(callRecordKey);
    let caller: AuthenticatedCaller | undefined;
    let apiKey: VerifiedApiKey | undefined;
    try {
      caller = await authenticator.authenticate(req.header.get("authorization"), {
        allowMfaEnrollment: rule.allowMfaEnrollment === true,
      });
      if (call !== undefined) call.caller = caller;
      const scopes = rule.apiKeyScopes ?? [];
      if (scopes.length > 0) {
        apiKey = await verifyApiKey(apiKeys, req.header.get("x-api-key"));
        if (call !== undefined) call.apiKeyId = apiKey.id;
      }
      if (rule.roles.length > 0 && !rule.roles.some((r) => caller?.roles.includes(r))) {
        throw permissionDenied(
          "ROLE",
          `this call needs one of the roles: ${rule.roles.join(", ")}`,
        );
      }
      const missing = scopes.filter((s) => !apiKey?.scopes.includes(s));
      if (missing.length > 0) {
        throw permissionDenied(
          "API_KEY_SCOPE",
          `API key lacks the needed permission: ${missing.join(", ")}`,
          { metadata: { missing_scopes: missing.join(",") } },
        );
      }
    } catch (err) {
      // Only refusals: a failure to decide (the database is down, say) is not a refusal.
      const refused =
        err instanceof DomainError &&
        (err.kind === "unauthenticated" || err.kind === "permission_denied");
      if (refused && call !== undefined) call.refusalReported = true;
      if (onRefused !== undefined && refused) {
        await onRefused({
          stage: "auth",
          rpc,
          rule,
          requestId: req.contextValues.get(requestIdKey),
          clientAddress: req.contextValues.get(clientAddressKey),
          userAgent: req.contextValues.get(userAgentKey),
          ...(caller ? { caller } : {}),
          ...(apiKey ? { apiKeyId: apiKey.id } : {}),
          message: req.stream ? undefined : req.message,
          error: err,
        });
      }
      throw err;
    }
    const principal: Principal = {
      kind: caller.kind,
      userId: caller.userId,
      username: caller.username,
      roles: caller.roles,
      sessionId: caller.sessionId,
      ...(apiKey ? { apiKey } : {}),
    };
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}

async function verifyApiKey(
  apiKeys: ApiKeyVerifier | undefined,
  header: string | null,
): Promise<VerifiedApiKey> {
  if (header === null || header.trim() === "") {
    throw unauthenticated("API_KEY_MISSING", "this call needs an X-API-Key header");
  }
  // Fail closed: a method asking for a key on a server that cannot check keys refuses.
  if (apiKeys === undefined) {
    throw unauthenticated("API_KEY_INVALID", "API keys cannot be checked on this server");
  }
  return apiKeys.verify(header.trim());
}
