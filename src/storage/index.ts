import { openPglite } from "./pglite.js";
import { openPostgres } from "./postgres.js";
import type { Database, OpenDatabaseOptions } from "./types.js";

export { DataDirLockedError } from "./dir-lock.js";
export { type MigrateOptions, type Migration, migrate, readMigrations } from "./migrate.js";
export type { ListenHandlers, NotificationSubscription } from "./notify.js";
export type {
  Database,
  DatabaseStats,
  Executor,
  OpenDatabaseOptions,
  PoolStats,
  Queryable,
  QueryOptions,
  QueryResult,
  Session,
} from "./types.js";
export { asUnavailable, databaseUnavailableReason, isConnectionError } from "./unavailable.js";

/**
 * Opens the database DB_CONNECTION names: a postgres:// URL → PostgreSQL through `pg`;
 * unset → the embedded PGlite in `dataDir`.
 */
export async function openDatabase(options: OpenDatabaseOptions): Promise<Database> {
  const { connection, log } = options;
  if (connection === undefined) {
    return openPglite({ dataDir: options.dataDir ?? "./data", log });
  }
  // The value is not repeated: it may hold a password.
  if (!/^postgres(ql)?:\/\//.test(connection)) {
    throw new Error(
      "DB_CONNECTION must be a postgres:// or postgresql:// URL (leave it unset for the embedded database)",
    );
  }
  return openPostgres({
    url: connection,
    schema: options.schema,
    acquireTimeoutMs: positive(options.acquireTimeoutMs, 5_000, "acquireTimeoutMs"),
    statementTimeoutMs: positive(options.statementTimeoutMs, 30_000, "statementTimeoutMs"),
    poolSize: positive(options.poolSize, 10, "poolSize"),
    log,
  });
}

function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value <= 0) {
    throw new Error(`database option ${name} must be a positive integer`);
  }
  return value;
}
