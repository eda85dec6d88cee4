import {
  Client,
  type ClientBase,
  type ClientConfig,
  escapeIdentifier,
  Pool,
  type PoolClient,
} from "pg";
import { registerTypes } from "pgvector/pg";
import type { Logger } from "../log.js";
import { createDatabase, type Driver, withTimeout } from "./database.js";
import { listenPostgres } from "./notify.js";
import { connectWithin, leaseOf, releaseAfter, runScript, runStatement } from "./pg-connections.js";
import type { Database } from "./types.js";

export interface PostgresOptions {
  /** postgres:// or postgresql:// URL; never logged (it may hold a password). */
  url: string;
  schema?: string | undefined;
  /** Longest wait for a connection: an idle one from the pool, or a new one set up. */
  acquireTimeoutMs: number;
  /**
   * Longest a statement may take: the server's statement_timeout, and a timer here, which
   * also fires when the server accepts connections but does not answer at all.
   */
  statementTimeoutMs: number;
  poolSize: number;
  log: Logger;
}

const schemaName = /^[a-z_][a-z0-9_]*$/;

/**
 * PostgreSQL through a `pg` pool, optionally confined to one schema (created if missing).
 * Every wait is bounded (src/storage/pg-connections.ts): taking a connection by
 * acquireTimeoutMs, each statement by statementTimeoutMs, except in sessions (maintenance:
 * migrations, index builds), whose statements may take as long as they need.
 */
export async function openPostgres(options: PostgresOptions): Promise<Database> {
  const { url, schema, log, acquireTimeoutMs, statementTimeoutMs } = options;
  if (schema !== undefined && !schemaName.test(schema)) {
    throw new Error(`invalid database schema name "${schema}": use [a-z_][a-z0-9_]*`);
  }
  const server = describeServer(url);
  const base: ClientConfig = {
    connectionString: url,
    connectionTimeoutMillis: acquireTimeoutMs,
    statement_timeout: statementTimeoutMs,
    application_name: "traitgate",
    keepAlive: true,
  };
  if (schema !== undefined) await createSchema(base, schema, statementTimeoutMs);

  const pool = new Pool({
    ...base,
    max: options.poolSize,
    idleTimeoutMillis: 30_000,
    // The schema first (tables go there); public after it, where extensions such as pgvector
    // are usually installed.
    ...(schema !== undefined ? { options: `-c search_path=${schema},public` } : {}),
    onConnect: registerVectorTypes,
  });
  let failedConnections = 0;
  pool.on("error", (err) => {
    failedConnections++;
    log.warn({ server, error: summary(err) }, "idle PostgreSQL connection failed");
  });
  log.debug({ server, schema, poolSize: options.poolSize }, "PostgreSQL pool created");

  // A connection that drops while checked out emits `error`; without a listener that would
  // end the process. The statement under way fails with it and reports it.
  const onError = (err: Error) => {
    failedConnections++;
    log.warn({ server, error: summary(err) }, "PostgreSQL connection failed while in use");
  };

  /** One pooled connection for one statement or script. */
  async function once<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await connectWithin(pool, acquireTimeoutMs);
    client.on("error", onError);
    let result: T;
    try {
      result = await work(client);
    } catch (err) {
      client.off("error", onError);
      releaseAfter(client, err);
      throw err;
    }
    client.off("error", onError);
    releaseAfter(client);
    return result;
  }

  const driver: Driver = {
    kind: "postgres",
    query: (sql, params, queryOptions) =>
      once((client) => runStatement(client, sql, params, statementTimeoutMs, queryOptions)),
    exec: (script) => once((client) => runScript(client, script, statementTimeoutMs)),
    async acquire(acquireOptions) {
      const client = await connectWithin(pool, acquireTimeoutMs);
      client.on("error", onError);
      const unbounded = acquireOptions?.unbounded === true;
      const lease = leaseOf(client, {
        timeoutMs: unbounded ? undefined : statementTimeoutMs,
        resetTimeoutMs: statementTimeoutMs,
        onRelease: () => client.off("error", onError),
      });
      if (unbounded) {
        try {
          await runScript(client, "SET statement_timeout = 0", statementTimeoutMs);
        } catch (err) {
          client.off("error", onError);
          releaseAfter(client, err);
          throw err;
        }
      }
      return lease;
    },
    ping: (timeoutMs) =>
      withTimeout(
        driver.query("select 1", undefined).then(() => {}),
        timeoutMs,
        "PostgreSQL",
      ),
    listen: (channel, handlers) =>
      listenPostgres(base, channel, handlers, log, { statementTimeoutMs }),
    pool: () => ({
      total: pool.totalCount,
      idle: pool.idleCount,
      waiting: pool.waitingCount,
      max: options.poolSize,
      failedConnections,
    }),
    async close() {
      await pool.end();
      log.debug({ server }, "PostgreSQL pool closed");
    },
  };
  return createDatabase(driver);
}

async function createSchema(base: ClientConfig, schema: string, timeoutMs: number): Promise<void> {
  const client = new Client(base);
  client.on("error", () => {}); // the failing call below reports it
  await client.connect();
  try {
    await runScript(client, `CREATE SCHEMA IF NOT EXISTS ${escapeIdentifier(schema)}`, timeoutMs);
  } catch (err) {
    // Two processes creating the same schema at once: the loser sees a duplicate.
    const code = (err as { code?: unknown }).code;
    if (code !== "23505" && code !== "42P06") throw err;
  } finally {
    await client.end();
  }
}

/** Parses pgvector's types into number[] on connections of a database that has the extension. */
async function registerVectorTypes(client: ClientBase): Promise<void> {
  const { rows } = await client.query("SELECT 1 FROM pg_type WHERE typname = 'vector'");
  if (rows.length > 0) await registerTypes(client);
}

/** Host, port and database of a connection URL, for logs: never the user or password. */
function describeServer(url: string): string {
  try {
    const { hostname, port, pathname } = new URL(url);
    return `${hostname}:${port || "5432"}${pathname}`;
  } catch {
    return "(unparsable URL)";
  }
}

/** An error's message and code only: pg errors may carry row values in `detail`. */
function summary(err: unknown): { message: string; code?: string } {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? { message, code } : { message };
}
