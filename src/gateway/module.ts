import type { CallRequest } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import {
  type AuditWriter,
  auditRefusedCalls,
  createRefusalSampler,
  refusedCallOrigin,
  singleTarget,
  summaryDetails,
  summaryFailed,
} from "../audit/index.js";
import { createSecretBox, type DataKeys } from "../crypto/secret-box.js";
import { createStateCache } from "../identity/state-cache.js";
import type { Clock } from "../identity/tokens.js";
import { bearerToken } from "../identity/validation.js";
import type { Logger } from "../log.js";
import type { PolicyEngine } from "../policy/index.js";
import type { ServiceModule } from "../server/app.js";
import { type Authenticator, type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Database, Queryable } from "../storage/index.js";
import { createOperatorAllowlist, type OperatorAllowlist } from "./allowlist.js";
import { createAllowlistStore } from "./allowlist-store.js";
import { writeOncePerTurn } from "./audit-turn.js";
import { coreListenerClass, createConnectGuard } from "./connect-guard.js";
import { type CoreListener, createCoreAddressCheck, createCoreDialCheck } from "./core-address.js";
import { createForwarder } from "./forwarder.js";
import { createGateway, type Gateway, type GatewayDeps } from "./gateway.js";
import { createHostPolicy, type HostResolver, systemResolver } from "./host-policy.js";
import { createOperatorCallFeed } from "./operator-calls.js";
import type { PluginRecord } from "./plugin-store.js";
import { createPluginStore } from "./plugin-store.js";
import { createPluginRegistry, credentialPrefix, type PluginRegistry } from "./plugins.js";
import { enginePluginPolicy, engineTraitCheck } from "./policy.js";
import { createPluginReachability } from "./reachability.js";
import {
  createGatewayService,
  createOperatorAllowlistService,
  createPluginRegistryService,
  GatewayService,
  isConnectDeadline,
  OperatorAllowlistService,
  PluginRegistryService,
} from "./service.js";

export interface GatewayConfig {
  /** PLUGIN_ALLOWED_HOSTS: hosts manifests may name without an explicit exception. */
  allowedHosts: readonly string[];
  /** GATEWAY_TIMEOUT_MS and GATEWAY_MAX_TIMEOUT_MS: a call's deadline when the caller sets none, and the cap. */
  defaultTimeoutMs: number;
  maxTimeoutMs: number;
  /** Largest plugin reply passed on (MAX_BODY_BYTES). */
  maxReplyBytes: number;
}

export interface GatewayModuleDeps {
  db: Database;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  log: Logger;
  dataKeys: DataKeys;
  config: GatewayConfig;
  /** The active policy engine (the policy area's; it may change while the platform runs). */
  policy: () => PolicyEngine;
  /** Plugin ids must not be service account names (both are allowlist callers). */
  isServiceAccountName: (name: string) => Promise<boolean>;
  clock?: Clock;
  /** How plugin host names resolve, at registration and when dialled (default: getaddrinfo). */
  resolveHost?: HostResolver;
  /** Where the core itself listens, once it does (a manifest may not point there). */
  coreListener?: () => CoreListener | undefined;
  /** Told of every gateway call once it ended (metrics). */
  onCallEnded?: GatewayDeps["onCallEnded"];
}

export interface GatewayArea {
  modules: ServiceModule[];
  registry: PluginRegistry;
  allowlist: OperatorAllowlist;
  /**
   * Removes the allowlist entries naming a deleted service account in the deletion's
   * transaction, so that they go with the account (and stay when the deletion rolls back).
   * Call what it returns once the deletion committed: this process then forgets them at once.
   */
  removeAllowlistEntries(tx: Queryable, name: string): Promise<() => void>;
  /** The in-process entry (core search calls plugins through it, as `ai-core`). */
  gateway: Gateway;
  /** Adds plugin credentials (`Bearer tgp_…`) to an authenticator of user and service tokens. */
  authenticator(base: Authenticator): Authenticator;
  close(): void;
}

const admin = (scope: string) => requireAuth({ roles: ["admin"], apiKeyScopes: [scope] });

/** PluginRegistryService methods that change nothing: `plugins:read`. */
const readMethods = new Set(["ListPlugins", "GetPlugin", "CheckPluginReachability"]);

/** How each method of the gateway's services is protected (also read by the OpenAPI generator). */
export const gatewayAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>([
  ...PluginRegistryService.methods.map(
    (m) =>
      [
        `${PluginRegistryService.typeName}/${m.name}`,
        admin(readMethods.has(m.name) ? "plugins:read" : "plugins:write"),
      ] as const,
  ),
  ...OperatorAllowlistService.methods.map(
    (m) =>
      [
        `${OperatorAllowlistService.typeName}/${m.name}`,
        admin(m.name === "ListAllowlistEntries" ? "operator:read" : "operator:write"),
      ] as const,
  ),
  // Any authenticated caller; the gateway itself checks that it is the caller it claims.
  [`${GatewayService.typeName}/Call`, requireAuth()],
  [
    `${GatewayService.typeName}/WatchOperatorCalls`,
    requireAuth({ roles: ["admin", "auditor"], apiKeyScopes: ["audit:read"] }),
  ],
]);

/** Wires the operator lane: registry, allowlist, gateway and their Connect services. */
export function createGatewayModule(deps: GatewayModuleDeps): GatewayArea {
  const clock = deps.clock ?? { now: () => Date.now() };
  const cacheOptions = { ttlMs: 1000, clock };
  const store = createPluginStore(deps.db);
  const allowlistStore = createAllowlistStore(deps.db);
  const box = createSecretBox(deps.dataKeys);
  const byId = createStateCache<PluginRecord | null>(
    async (id) => (await store.find(id)) ?? null,
    cacheOptions,
  );
  const byCredential = createStateCache<PluginRecord | null>(
    async (hex) => (await store.findByCredentialHash(Buffer.from(hex, "hex"))) ?? null,
    cacheOptions,
  );
  const allowlist = createOperatorAllowlist({
    db: deps.db,
    audit: deps.audit,
    plugin: (id) => store.find(id),
    callerExists: async (name) =>
      (await store.find(name)) !== undefined || (await deps.isServiceAccountName(name)),
    clock,
  });
  // Entries naming a deleted plugin or service account go in its deletion's transaction; once
  // that committed, this process forgets them (other processes' lookups lapse within a second).
  const removeAllowlistEntries = async (tx: Queryable, name: string) => {
    const removed = await createAllowlistStore(tx).deleteNaming(name);
    return () => allowlist.forget(removed);
  };
  const resolve = deps.resolveHost ?? systemResolver;
  const hosts = createHostPolicy({ allowedHosts: deps.config.allowedHosts, resolve });
  // Registration and every dial refuse the core's own listener, from the same sources.
  const coreListener = deps.coreListener ?? (() => undefined);
  const registry = createPluginRegistry({
    db: deps.db,
    box,
    audit: deps.audit,
    hosts,
    refuseCore: createCoreAddressCheck({ listener: coreListener, resolve }),
    checkTrait: engineTraitCheck(deps.policy),
    byId,
    byCredential,
    isServiceAccountName: deps.isServiceAccountName,
    removeAllowlistEntries,
    operationsInUse: async (pluginId) =>
      new Set((await allowlistStore.list({ target: pluginId })).flatMap((e) => e.operations)),
  });
  // The core's Authorization header for a plugin, opened once per sealed value (i.e. per rotation).
  const opened = new Map<string, { sealed: string; authorization: string }>();
  const forwarder = createForwarder({
    maxReplyBytes: deps.config.maxReplyBytes,
    guard: createConnectGuard({
      policy: hosts,
      resolve,
      core: createCoreDialCheck({ listener: coreListener, resolve }),
      onRefused: ({ host, port, address, addressClass }) =>
        deps.log.warn(
          { area: "gateway", plugin_host: host, port, address, address_class: addressClass },
          addressClass === coreListenerClass
            ? "plugin connection refused: the host and port are or resolve to this core's own listening address"
            : "plugin connection refused: the host is or resolves to an address plugins may not be reached at",
        ),
    }),
  });
  // operator_call events go to the writer once per event-loop turn (one transaction per turn).
  const callAudit = writeOncePerTurn(deps.audit);
  const gateway = createGateway({
    plugin: (id) => byId.get(id),
    coreAuthorization: (plugin) => {
      const hit = opened.get(plugin.manifest.id);
      if (hit?.sealed === plugin.coreSecretSealed) return hit.authorization;
      const authorization = `Bearer ${registry.coreSecret(plugin)}`;
      opened.set(plugin.manifest.id, { sealed: plugin.coreSecretSealed, authorization });
      return authorization;
    },
    allowlist,
    policy: enginePluginPolicy(deps.policy),
    forwarder,
    audit: callAudit,
    log: deps.log.child({ area: "gateway" }),
    timeouts: { defaultMs: deps.config.defaultTimeoutMs, maxMs: deps.config.maxTimeoutMs },
    isDeadline: isConnectDeadline,
    ...(deps.onCallEnded ? { onCallEnded: deps.onCallEnded } : {}),
  });
  const reachability = createPluginReachability({
    forwarder,
    manifests: async (pluginId) =>
      pluginId === undefined
        ? (await registry.list()).map((p) => p.manifest)
        : [(await registry.get(pluginId)).manifest],
    timeoutMs: deps.config.defaultTimeoutMs,
  });
  const feed = createOperatorCallFeed({ db: deps.db });
  const refusedAdmin = auditRefusedCalls(deps.audit, { log: deps.log });
  // Anonymous refused calls are sampled per address, and the rest counted in one event at
  // the end of the window (src/audit/refusal-sampler.ts).
  const anonymousCalls = createRefusalSampler({
    summarize: (summary) =>
      deps.audit.write({
        actorType: "anonymous",
        action: "operator_call",
        target: singleTarget(summary),
        outcome: "denied",
        details: { ...summaryDetails(summary), status: 401 },
      }),
    onError: summaryFailed(deps.log, "operator_call"),
  });
  const gatewayService = createGatewayService(gateway, feed);
  return {
    registry,
    gateway,
    allowlist,
    removeAllowlistEntries,
    modules: [
      {
        services: [PluginRegistryService, OperatorAllowlistService, GatewayService],
        register: (router) =>
          router
            .service(PluginRegistryService, createPluginRegistryService(registry, reachability))
            .service(OperatorAllowlistService, createOperatorAllowlistService(allowlist))
            .service(GatewayService, gatewayService),
        authRules: gatewayAuthRules,
        // A gateway call refused before the gateway ran (by authentication, validation, or
        // the transport: a body too large or malformed) is an operator_call like any other:
        // one event per call.
        onRefused: async (call) => {
          if (call.rpc !== `${GatewayService.typeName}/Call`) {
            return call.stage === "auth" ? refusedAdmin(call) : undefined;
          }
          // The request may not be validated (authentication runs first) or not even read
          // (a body too large: only the path's names): keep only well-formed names, so an
          // anonymous caller cannot write what it likes.
          const req = (call.message ?? {}) as Partial<CallRequest>;
          const name = (v: unknown, pattern: RegExp) =>
            v === undefined || v === ""
              ? ""
              : typeof v === "string" && pattern.test(v)
                ? v
                : "<invalid>";
          const pluginId = name(req.pluginId, /^[a-z0-9][a-z0-9-]{0,62}$/);
          if (!call.caller && !anonymousCalls.take(call.clientAddress, `plugin:${pluginId}`)) {
            return;
          }
          const { kind } = call.error;
          await deps.audit.write({
            actorType: call.caller?.kind ?? "anonymous",
            actorId: call.caller?.userId ?? null,
            action: "operator_call",
            target: `plugin:${pluginId}`,
            // A credential that could not be checked (the database is down) is an error.
            outcome:
              kind === "unavailable" || kind === "internal" || kind === "deadline_exceeded"
                ? "error"
                : "denied",
            requestId: call.requestId,
            origin: refusedCallOrigin(call),
            details: {
              caller: name(req.callerPlugin, /^[a-z0-9][a-z0-9-]{0,62}$/),
              operation: name(req.operation, /^[a-z][a-z0-9_]{0,62}$/),
              status: call.status ?? (kind === "unauthenticated" ? 401 : 403),
              reason: call.error.reason,
              latency_ms: 0,
              payload_bytes: 0,
              count: 1,
            },
          });
        },
      },
    ],
    authenticator: (base) => ({
      async authenticate(authorization, options) {
        const token = bearerToken(authorization);
        if (typeof token === "string" && token.startsWith(credentialPrefix)) {
          const manifest = await registry.authenticate(token);
          return {
            kind: "plugin",
            userId: manifest.id,
            username: manifest.id,
            roles: [],
            sessionId: "",
          };
        }
        return base.authenticate(authorization, options);
      },
    }),
    close: () => {
      callAudit.flush();
      // Queues the pending counts of sampled-out refusals (the writer's close commits them).
      void refusedAdmin.close();
      void anonymousCalls.close();
      forwarder.close();
    },
  };
}
