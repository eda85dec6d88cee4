import { type AuditWriter, auditRefusedCalls, createAuditWriter } from "./audit/index.js";
import { type Config, embeddedDatabaseDir } from "./config.js";
import type { Identity } from "./identity/identity.js";
import { createIdentityModule } from "./identity/module.js";
import type { ThrottlePolicy } from "./identity/throttle.js";
import type { Clock } from "./identity/tokens.js";
import { createUserAdminModule } from "./identity/user-admin-service.js";
import type { Logger } from "./log.js";
import { createApp } from "./server/app.js";
import { listen, type RunningServer } from "./server/listener.js";
import { type Database, migrate, openDatabase } from "./storage/index.js";

export interface Core {
  server: RunningServer;
  audit: AuditWriter;
  db: Database;
  identity: Identity;
  close(): Promise<void>;
}

export interface StartCoreOptions {
  config: Config;
  log: Logger;
  /** Tests pass a fixed clock or an already-open database. */
  clock?: Clock;
  db?: Database;
  throttlePolicy?: ThrottlePolicy;
}

/** Opens the database, applies migrations, wires every area and listens. */
export async function startCore(options: StartCoreOptions): Promise<Core> {
  const { config, log } = options;
  const db =
    options.db ??
    (await openDatabase({
      connection: config.dbConnection,
      dataDir: embeddedDatabaseDir(config),
      log,
    }));
  try {
    const { applied } = await migrate(db, log);
    if (applied.length > 0) log.info({ applied }, "database migrated");
    const audit = createAuditWriter({ db, log: log.child({ area: "audit" }) });
    const {
      identity,
      module: identityModule,
      serviceAccountAdmin,
      passwords,
    } = await createIdentityModule({
      db,
      audit,
      dataKeys: config.dataKeys,
      mfaRequired: config.mfaRequired,
      jwt: config.jwt,
      log,
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.throttlePolicy ? { throttlePolicy: options.throttlePolicy } : {}),
    });
    const { listener } = createApp({
      modules: [
        identityModule,
        serviceAccountAdmin,
        createUserAdminModule({
          db,
          audit,
          passwords,
          forget: (userId) => identity.forgetUser(userId),
          revokeSessions: (userId, reason) => identity.revokeUserSessions(userId, reason),
          resetMfa: (userId) => identity.mfa.reset(userId),
        }),
      ],
      authenticator: identity,
      onRefused: auditRefusedCalls(audit),
      health: {
        check: () =>
          db.ping(1000).then(
            () => "SERVING" as const,
            () => "NOT_SERVING" as const,
          ),
      },
      log,
      maxBodyBytes: config.maxBodyBytes,
    });
    const server = await listen(listener, {
      port: config.port,
      host: config.host,
      tls: config.tls,
    });
    log.info(
      { url: server.url, tls: config.tls !== undefined, db: db.kind },
      "traitgate listening",
    );
    return {
      server,
      db,
      identity,
      audit,
      async close() {
        await server.close();
        await audit.close();
        if (!options.db) await db.close();
      },
    };
  } catch (err) {
    if (!options.db) await db.close().catch(() => undefined);
    throw err;
  }
}
