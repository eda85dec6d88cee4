import { createHash, timingSafeEqual } from "node:crypto";
import { unauthenticated } from "../errors.js";
import type { AuthenticatedCaller, Authenticator } from "../server/interceptors.js";

/** Who the plugin sees on every accepted call: the core, calling as `ai-core`. */
const core: AuthenticatedCaller = {
  kind: "service",
  userId: "ai-core",
  username: "ai-core",
  roles: [],
  sessionId: "",
};

/**
 * The plugin has no users: a call is accepted only with the secret the core presents to it
 * (`Authorization: Bearer tgc_…`, printed when the plugin was registered). Both sides are
 * hashed to equal lengths and compared in constant time; anything else is 401.
 */
export function createCoreSecretAuthenticator(coreSecret: string): Authenticator {
  const expected = digest(`Bearer ${coreSecret}`);
  return {
    async authenticate(authorization) {
      if (authorization === null || authorization === "") {
        throw unauthenticated("MISSING", "this plugin accepts calls from the Traitgate core only");
      }
      if (!timingSafeEqual(digest(authorization), expected)) {
        throw unauthenticated("INVALID", "this plugin accepts calls from the Traitgate core only");
      }
      return core;
    },
  };
}

const digest = (value: string): Buffer => createHash("sha256").update(value).digest();
