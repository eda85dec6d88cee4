import { type ContextKey, createContextKey } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { RequestOrigin } from "../audit/event.js";
import { permissionDenied, unauthenticated } from "../errors.js";
import { silentLogger } from "../log.js";

/**
 * Per-request values, set by interceptors (src/server/interceptors.ts) and read
 * by handlers. Declared here, in one place.
 */

/** Who is calling, once a bearer token has been verified. */
export interface Principal {
  /**
   * A person (logged in), a service account (client credentials), or an operator
   * plugin (its registry credential; no roles, only good for gateway calls).
   */
  kind: "user" | "service" | "plugin";
  /** The user's, service account's or plugin's id. */
  userId: string;
  username: string;
  roles: readonly string[];
  /** The login session of a user's access token; empty for service accounts. */
  sessionId: string;
  /** The API key presented with the call, when the method asks for one. */
  apiKey?: { id: string; scopes: readonly string[]; expiresAt?: Date | null };
}

export const requestIdKey = createContextKey<string>("", { description: "request id" });

export const loggerKey = createContextKey<Logger>(silentLogger, {
  description: "request-scoped logger",
});

/**
 * The client's address: the TCP peer, or the client a trusted proxy names (src/server/origin.ts,
 * resolved once when the request arrives). What the login throttle counts by.
 */
export const clientAddressKey = createContextKey<string>("unknown", {
  description: "client address",
});

/** The request's User-Agent as recorded (src/server/origin.ts); "" when it sent none. */
export const userAgentKey = createContextKey<string>("", { description: "user agent" });

/** Where the request came from, for the audit events it causes. */
export const originOf = (values: { get<T>(key: ContextKey<T>): T }): RequestOrigin => ({
  clientAddress: values.get(clientAddressKey),
  userAgent: values.get(userAgentKey),
});

/** The request's id and origin: what a handler hands the domain for its audit events. */
export const auditedRequestOf = (values: {
  get<T>(key: ContextKey<T>): T;
}): { requestId: string; origin: RequestOrigin } => ({
  requestId: values.get(requestIdKey),
  origin: originOf(values),
});

export const principalKey = createContextKey<Principal | undefined>(undefined, {
  description: "authenticated principal",
});

/**
 * What the access log line and the record of a refused call need to know about one call,
 * filled in by each layer it passes (src/server/call-record.ts). Never logged as a whole.
 */
export interface CallRecord {
  readonly requestId: string;
  /** The client's address (src/server/origin.ts). */
  readonly clientAddress: string;
  /** The TCP peer, when a trusted proxy named another client. */
  readonly peerAddress?: string;
  /** The User-Agent as recorded; never logged. */
  readonly userAgent: string;
  /** performance.now() when the request arrived. */
  readonly started: number;
  /** "grpc", "grpc-web", "connect", "rest" or "http" (probes). */
  protocol: string;
  /** "<package.Service>/<Method>", once the request is known to be for a method. */
  rpc?: string;
  /** A REST call's route: "POST /gateway/{plugin_id}/{operation}" (the template, not the path). */
  route?: string;
  /** Who called, once a credential was verified (also when the call was then refused). */
  caller?: Omit<Principal, "apiKey">;
  apiKeyId?: string;
  /** The request message once parsed (for the record of a refused call; never logged). */
  message?: unknown;
  /** The outcome: 0 for success, else the Connect code, with the ErrorInfo reason. */
  code?: number;
  reason?: string;
  /** The auth interceptor has reported the call's refusal (to the `onRefused` hooks). */
  refusalReported: boolean;
  /** The method's implementation was called (past authentication and validation). */
  handled: boolean;
}

export const callRecordKey = createContextKey<CallRecord | undefined>(undefined, {
  description: "the call's record, for the access log",
});

/**
 * The caller of a method that acts on the platform (administration, the
 * caller's own account): a user or a service account. Plugin credentials are
 * good for gateway calls only. Throws when the auth interceptor set no
 * principal (a public method) or the caller is a plugin.
 */
export function staffPrincipal(values: {
  get<T>(key: ContextKey<T>): T;
}): Principal & { kind: "user" | "service" } {
  const principal = values.get(principalKey);
  if (principal === undefined) throw unauthenticated("MISSING", "this call needs an access token");
  if (principal.kind === "plugin") {
    throw permissionDenied(
      "PLUGIN_NOT_ALLOWED",
      "plugin credentials are good for gateway calls only",
    );
  }
  return principal as Principal & { kind: "user" | "service" };
}
