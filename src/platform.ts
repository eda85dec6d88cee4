import { Registry } from "prom-client";
import type { ApiKeys } from "./apikeys/api-keys.js";
import { createApiKeysModule } from "./apikeys/module.js";
import {
  type AuditCheckpoints,
  type AuditWriter,
  auditRefusedCalls,
  createAuditCheckpoints,
  createAuditQueryModule,
  createAuditWriter,
} from "./audit/index.js";
import { type Config, embeddedDatabaseDir } from "./config.js";
import { withConsole } from "./console/index.js";
import type { OperatorAllowlist } from "./gateway/allowlist.js";
import type { Gateway } from "./gateway/gateway.js";
import type { HostResolver } from "./gateway/host-policy.js";
import { createGatewayModule, type GatewayArea } from "./gateway/module.js";
import type { PluginRegistry } from "./gateway/plugins.js";
import { createIdentityModule, type IdentityArea } from "./identity/module.js";
import type { PasswordCost } from "./identity/passwords.js";
import type { ServiceAccounts } from "./identity/service-accounts.js";
import type { ThrottlePolicy } from "./identity/throttle.js";
import type { Clock } from "./identity/tokens.js";
import { createUserAdminModule } from "./identity/user-admin-service.js";
import type { Logger } from "./log.js";
import {
  collectCoreMetrics,
  createMetrics,
  exposeMetrics,
  type Metrics,
  type MetricsSource,
} from "./metrics/index.js";
import { createPolicyModule, type PolicyArea } from "./policy/module.js";
import { aiCoreCaller } from "./search/backend.js";
import { createSearchModule } from "./search/module.js";
import type { Search } from "./search/search.js";
import { createApp, type ServedApi } from "./server/app.js";
import { followCorsOrigins } from "./server/cors.js";
import { listen, type RunningServer } from "./server/listener.js";
import { createOriginResolver, parseTrustedProxies } from "./server/origin.js";
import type { LiveSettings } from "./settings/live.js";
import { followLogLevel } from "./settings/log-level.js";
import { createSettingsModule } from "./settings/module.js";
import type { Settings } from "./settings/settings.js";
import { type Database, migrate, openDatabase } from "./storage/index.js";

export interface Core {
  server: RunningServer;
  audit: AuditWriter;
  db: Database;
  identity: IdentityArea;
  /** API key management (demo mode creates a key through it). */
  apiKeys: ApiKeys;
  /** The settings this process runs with; subscribe to follow changes (docs/settings.md). */
  settings: LiveSettings;
  /** The operator lane's in-process entry (core search calls plugins through it). */
  gateway: Gateway;
  plugins: PluginRegistry;
  allowlist: OperatorAllowlist;
  serviceAccounts: ServiceAccounts;
  /** Settings administration (the demo sets the RAG backend through it). */
  settingsAdmin: Settings;
  /** Retrieval: search and ingestion (docs/rag.md). */
  search: Search;
  /** The policy area; `policy.current()` is the active compiled engine (docs/policy.md). */
  policy: PolicyArea;
  /** This core's metrics (on its own registry) and where they are served (docs/operations.md). */
  metrics: Metrics;
  metricsAt: { url: string; access: string };
  /** The audit log's signed checkpoints (tests write one at will). */
  auditCheckpoints: AuditCheckpoints;
  /** The REST routes this core serves and each method's auth rule (checked against gen/openapi.json). */
  api: ServedApi;
  close(): Promise<void>;
}

export interface StartCoreOptions {
  config: Config;
  log: Logger;
  /** Tests pass a fixed clock or an already-open database. */
  clock?: Clock;
  db?: Database;
  throttlePolicy?: ThrottlePolicy;
  /** New password hashes' cost: tests pass a cheaper one; never from configuration. */
  passwordCost?: PasswordCost;
  /** The environment config came from (default process.env): settings show it as a source. */
  env?: NodeJS.ProcessEnv;
  /** Settings: version poll behind LISTEN/NOTIFY (default 5 s). */
  settingsPollIntervalMs?: number;
  /** Policy: generation poll behind LISTEN/NOTIFY (default 1 s). */
  policyPollIntervalMs?: number;
  /** How plugin host names resolve (default getaddrinfo); tests pass their own. */
  resolveHost?: HostResolver;
  /** The process's last-resort guard (src/server/last-resort.ts), whose count is a metric. */
  lastResort?: { caught(): number };
  /** What `/metrics` answers, given this process's registry (default: that registry). */
  metricsSource?: (own: Registry) => MetricsSource;
}

/** Opens the database, applies migrations, wires every area and listens. */
export async function startCore(options: StartCoreOptions): Promise<Core> {
  const { config, log } = options;
  const metrics = createMetrics(new Registry());
  const db =
    options.db ??
    (await openDatabase({
      connection: config.dbConnection,
      dataDir: embeddedDatabaseDir(config),
      // Every wait for PostgreSQL is bounded (docs/architecture.md).
      acquireTimeoutMs: config.database.acquireTimeoutMs,
      statementTimeoutMs: config.database.statementTimeoutMs,
      log,
    }));
  let stopSettings: () => Promise<void> = async () => {};
  let stopPolicy: () => Promise<void> = async () => {};
  let stopMetrics: () => Promise<void> = async () => {};
  try {
    const { applied } = await migrate(db, log);
    if (applied.length > 0) log.info({ applied }, "database migrated");
    const audit = createAuditWriter({
      db,
      log: log.child({ area: "audit" }),
      observe: metrics.audit,
    });
    const settingsArea = await createSettingsModule({
      db,
      audit,
      dataKeys: config.dataKeys,
      config,
      env: options.env ?? process.env,
      log,
      ...(options.settingsPollIntervalMs ? { pollIntervalMs: options.settingsPollIntervalMs } : {}),
    });
    stopSettings = () => settingsArea.live.close();
    followLogLevel(log, settingsArea.live);
    let gatewayArea: GatewayArea | undefined;
    // Where this core listens, once it does: plugin manifests may not point there.
    let listening: RunningServer | undefined;
    const {
      identity,
      serviceAccounts,
      module: identityModule,
      serviceAccountAdmin,
      passwords,
    } = await createIdentityModule({
      db,
      audit,
      dataKeys: config.dataKeys,
      mfaRequired: config.mfaRequired,
      // auth.* settings apply at the next login, on every process (docs/settings.md).
      live: {
        mfaRequired: () => settingsArea.live.current().values["auth.mfa_required"] === true,
        tokenTtlSeconds: () => Number(settingsArea.live.current().values["auth.token_ttl_seconds"]),
      },
      jwt: config.jwt,
      log,
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.throttlePolicy ? { throttlePolicy: options.throttlePolicy } : {}),
      ...(options.passwordCost ? { passwordCost: options.passwordCost } : {}),
      // Plugin ids and service account names are both gateway callers: each side asks the other.
      callerNameTaken: (name) => gatewayArea?.registry.exists(name) ?? Promise.resolve(false),
      serviceAccountDeleted: async (tx, name) => gatewayArea?.removeAllowlistEntries(tx, name),
    });
    const apiKeysArea = createApiKeysModule({
      db,
      audit,
      log,
      ...(options.clock ? { clock: options.clock } : {}),
    });
    const { module: policyModule, area: policyArea } = await createPolicyModule({
      db,
      audit,
      log,
      ...(options.policyPollIntervalMs ? { pollIntervalMs: options.policyPollIntervalMs } : {}),
      onDecision: (d, count) => metrics.policyDecision(d.decision, d.reasonCode, count),
    });
    stopPolicy = () => policyArea.close();
    gatewayArea = createGatewayModule({
      db,
      audit,
      log,
      dataKeys: config.dataKeys,
      config: { ...config.gateway, maxReplyBytes: config.maxBodyBytes },
      policy: () => policyArea.current(),
      isServiceAccountName: (name) => serviceAccounts.exists(name),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.resolveHost ? { resolveHost: options.resolveHost } : {}),
      // The address the listener is bound to: an IP, so nothing is resolved to tell it.
      coreListener: () =>
        listening ? { host: listening.boundAddress, port: listening.port } : undefined,
      onCallEnded: (call) => metrics.gatewayCall(call),
    });
    const gateway = gatewayArea;
    const searchArea = createSearchModule({
      db,
      audit,
      log,
      gateway: gateway.gateway,
      policy: () => policyArea.current(),
      settings: settingsArea.live,
      // An operation the plugin offers ai-core: in its manifest, and granted by the allowlist
      // (a manifest may list what the allowlist does not grant: the core then does without).
      pluginDeclares: async (pluginId, operation) => {
        const plugins = await gateway.registry.list();
        const plugin = plugins.find((p) => p.manifest.id === pluginId);
        if (plugin === undefined || !Object.hasOwn(plugin.manifest.endpoints, operation)) {
          return false;
        }
        return (await gateway.allowlist.operationsFor(aiCoreCaller.name, pluginId)).has(operation);
      },
    });
    const refusedCalls = auditRefusedCalls(audit, { log: log.child({ area: "audit" }) });
    const { listener, handlers, api } = createApp({
      modules: [
        identityModule,
        serviceAccountAdmin,
        createUserAdminModule({
          db,
          audit,
          passwords,
          forget: (userId, sessionIds) => {
            identity.forgetUser(userId);
            identity.forgetSessions(sessionIds);
          },
          revokeSessions: (tx, userId, reason) => identity.revokeUserSessions(tx, userId, reason),
          resetMfa: (tx, userId) => identity.mfa.reset(tx, userId),
        }),
        apiKeysArea.module,
        createAuditQueryModule({
          db,
          trustedCheckpointKeys: config.auditCheckpoints.keys.trusted,
        }),
        settingsArea.module,
        policyModule,
        ...gateway.modules,
        searchArea.module,
      ],
      // Plugin credentials (Bearer tgp_…) authenticate gateway callers; tokens everything else.
      authenticator: gateway.authenticator(identity),
      apiKeys: apiKeysArea.verifier,
      onRefused: refusedCalls,
      health: {
        check: () =>
          db.ping(1000).then(
            () => "SERVING" as const,
            () => "NOT_SERVING" as const,
          ),
      },
      log,
      maxBodyBytes: config.maxBodyBytes,
      onCallEnded: (call, code, seconds) => metrics.callEnded(call, code, seconds),
      trustedProxies: config.trustedProxies,
      corsOrigins: followCorsOrigins(settingsArea.live).allowedOrigins,
    });
    const consoleListener = withConsole(listener, {
      db,
      handlers,
      apiKeys: apiKeysArea.verifier,
      audit,
      log,
      dataKeys: config.dataKeys,
      tls: config.tls !== undefined,
      idleTimeoutSeconds: config.console.idleTimeoutSeconds,
      originOf: createOriginResolver(parseTrustedProxies(config.trustedProxies).proxies),
    });
    // Metrics outside the console's wrapper: /metrics is not a console path.
    const metricsEndpoint = await exposeMetrics(consoleListener, {
      registry: options.metricsSource?.(metrics.registry) ?? metrics.registry,
      config: config.metrics,
      log,
    });
    stopMetrics = () => metricsEndpoint.close();
    const server = await listen(metricsEndpoint.listener, {
      port: config.port,
      host: config.host,
      tls: config.tls,
      ...config.listener,
      log,
    });
    listening = server;
    collectCoreMetrics(metrics.registry, {
      listener: server,
      db,
      audit,
      lastResort: options.lastResort,
    });
    const metricsUrl = metricsEndpoint.url(server.url);
    log.info(
      {
        url: server.url,
        address: server.address,
        console: `${server.url}/console/`,
        openapi: `${server.url}/openapi.json`,
        tls: config.tls !== undefined,
        db: db.kind,
        metrics: metricsUrl,
        metrics_access: metricsEndpoint.access,
      },
      "traitgate listening",
    );
    const checkpoints = createAuditCheckpoints({
      db,
      log: log.child({ area: "audit" }),
      key: config.auditCheckpoints.keys.signing,
      intervalMs: config.auditCheckpoints.intervalSeconds * 1000,
    });
    return {
      server,
      db,
      identity,
      audit,
      apiKeys: apiKeysArea.apiKeys,
      settings: settingsArea.live,
      gateway: gateway.gateway,
      plugins: gateway.registry,
      allowlist: gateway.allowlist,
      serviceAccounts,
      settingsAdmin: settingsArea.settings,
      search: searchArea.search,
      policy: policyArea,
      metrics,
      metricsAt: { url: metricsUrl, access: metricsEndpoint.access },
      auditCheckpoints: checkpoints,
      api,
      async close() {
        await server.close();
        await metricsEndpoint.close();
        // Queues the counts of sampled-out refusals; audit.close() commits them.
        void refusedCalls.close();
        gateway.close();
        await settingsArea.live.close();
        await policyArea.close();
        await audit.close();
        // Signs the head once every event is committed (a log pipeline keeps the line).
        await checkpoints.close();
        if (!options.db) await db.close();
      },
    };
  } catch (err) {
    await stopSettings().catch(() => undefined);
    await stopPolicy().catch(() => undefined);
    await stopMetrics().catch(() => undefined);
    if (!options.db) await db.close().catch(() => undefined);
    throw err;
  }
}
