import { createContextKey } from "@connectrpc/connect";
import type { Logger } from "pino";
import { silentLogger } from "../log.js";

/**
 * Per-request values, set by interceptors (src/server/interceptors.ts) and read
 * by handlers. Declared here, in one place.
 */

/** Who is calling, once a bearer token has been verified. */
export interface Principal {
  userId: string;
  username: string;
  roles: readonly string[];
  /** The login session of the caller's access token. */
  sessionId: string;
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
