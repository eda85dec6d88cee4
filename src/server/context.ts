import { createContextKey } from "@connectrpc/connect";
import type { Logger } from "pino";
import { silentLogger } from "../log.js";

/**
 * Per-request values, set by interceptors (src/server/interceptors.ts) and read
 * by handlers. Declared here, in one place.
 */

/** Who is calling, once a bearer token has been verified. */
export interface Principal {
  /** A person (logged in) or a service account (client credentials). */
  kind: "user" | "service";
  /** The user's or the service account's id. */
  userId: string;
  username: string;
  roles: readonly string[];
  /** The login session of a user's access token; empty for service accounts. */
  sessionId: string;
  /** The API key presented with the call, when the method asks for one. */
  apiKey?: { id: string; scopes: readonly string[] };
}

export const requestIdKey = createContextKey<string>("", { description: "request id" });

export const loggerKey = createContextKey<Logger>(silentLogger, {
  description: "request-scoped logger",
});

/** The client's network address as this server saw it (the TCP peer; no proxy headers). */
export const clientAddressKey = createContextKey<string>("unknown", {
  description: "client address",
});

export const principalKey = createContextKey<Principal | undefined>(undefined, {
  description: "authenticated principal",
});
