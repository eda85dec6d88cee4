import { ApiKeyService } from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import type { AuditWriter } from "../audit/index.js";
import type { Logger } from "../log.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Queryable, Session } from "../storage/index.js";
import { createApiKeyStore } from "./api-key-store.js";
import { type ApiKeys, createApiKeys } from "./api-keys.js";
import { createApiKeyService } from "./service.js";
import { type ApiKeyClock, createApiKeyVerifier, type LocalApiKeyVerifier } from "./verifier.js";

export interface ApiKeysModuleDeps {
  db: Queryable & Pick<Session, "transaction">;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  log: Logger;
  clock?: ApiKeyClock;
  /** How long the verifier remembers a key's state (default 1000 ms). */
  cacheTtlMs?: number;
}

const svc = ApiKeyService.typeName;
const write = requireAuth({ roles: ["admin"], apiKeyScopes: ["api_keys:write"] });
const read = requireAuth({ roles: ["admin", "auditor"], apiKeyScopes: ["api_keys:read"] });
/** How each method of ApiKeyService is protected (also read by the OpenAPI generator). */
export const apiKeyAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>([
  [`${svc}/CreateApiKey`, write],
  [`${svc}/RevokeApiKey`, write],
  [`${svc}/ListApiKeys`, read],
  [`${svc}/GetApiKey`, read],
]);

/**
 * Wires API keys: the store, the verifier the auth interceptor checks `X-API-Key` with
 * (pass it to createApp as `apiKeys`), the domain (the command line uses it) and the service.
 */
export function createApiKeysModule(deps: ApiKeysModuleDeps): {
  module: ServiceModule;
  verifier: LocalApiKeyVerifier;
  apiKeys: ApiKeys;
} {
  const clock = deps.clock ?? { now: () => Date.now() };
  const store = createApiKeyStore(deps.db);
  const log = deps.log.child({ area: "apikeys" });
  const verifier = createApiKeyVerifier({
    store,
    clock,
    log,
    ...(deps.cacheTtlMs === undefined ? {} : { cacheTtlMs: deps.cacheTtlMs }),
  });
  const apiKeys = createApiKeys({
    db: deps.db,
    audit: deps.audit,
    clock,
    forget: (prefix) => verifier.forget(prefix),
  });
  const service = createApiKeyService(apiKeys);
  return {
    verifier,
    apiKeys,
    module: {
      services: [ApiKeyService],
      register: (router) => router.service(ApiKeyService, service),
      authRules: apiKeyAuthRules,
    },
  };
}

export { ApiKeyService };
