import {
  Client,
  type ClientBase,
  type ClientConfig,
  escapeIdentifier,
  type QueryResult as PgResult,
  Pool,
  type QueryConfig,
} from "pg";
import { registerTypes } from "pgvector/pg";
import type { Logger } from "../log.js";
import { createDatabase, type Driver, withTimeout } from "./database.js";
import { listenPostgres } from "./notify.js";
import type { Database, Executor, QueryResult } from "./types.js";

export interface PostgresOptions {
  /** postgres:// or postgresql:// URL; never logged (it may hold a password). */
  url: string;
  schema?: string | undefined;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  poolSize: number;
  log: Logger;
}

const schemaName = /^[a-z_][a-z0-9_]*$/;

/** PostgreSQL through a `pg` pool, optionally confined to one schema (created if missing). */
export async function openPostgres(options: PostgresOptions): Promise<Database> {
  const { url, schema, log } = options;
  if (schema !== undefined && !schemaName.test(schema)) {
    throw new Error(`invalid database schema name "${schema}": use [a-z_][a-z0-9_]*`);
  }
  const server = describeServer(url);
  const base: ClientConfig = {
    connectionString: url,
    connectionTimeoutMillis: options.connectTimeoutMs,
    statement_timeout: options.statementTimeoutMs,
    application_name: "traitgate",
    keepAlive: true,
  };
  if (schema !== undefined) await createSchema(base, schema);

  const pool = new Pool({
    ...base,
    max: options.poolSize,
    idleTimeoutMillis: 30_000,
    // The schema first (tables go there); public after it, where extensions such as pgvector
    // are usually installed.
    ...(schema !== undefined ? { options: `-c search_path=${schema},public` } : {}),
    onConnect: registerVectorTypes,
  });
  pool.on("error", (err) => {
    log.warn({ server, error: summary(err) }, "idle PostgreSQL connection failed");
  });
  log.debug({ server, schema, poolSize: options.poolSize }, "PostgreSQL pool created");

  const driver: Driver = {
    kind: "postgres",
    query: (sql, params) => run(pool, sql, params),
    async exec(script) {
      await pool.query(script);
    },
    async acquire() {
      const client = await pool.connect();
      // A connection that drops between two statements of a transaction emits `error`;
      // without a listener that would end the process.
      const onError = (err: Error) => {
        log.warn({ server, error: summary(err) }, "PostgreSQL connection failed while in use");
      };
      client.on("error", onError);
      const conn: Executor = {
        query: (sql, params) => run(client, sql, params),
        async exec(script) {
          await client.query(script);
        },
      };
      return {
        conn,
        async release(reset) {
          client.off("error", onError);
          if (!reset) return client.release();
          // Reset before closing, so that locks are free as soon as this resolves (closing
          // alone frees them only when the server notices). Closed rather than pooled again,
          // so the next connection also learns types a migration created (pgvector's).
          try {
            await client.query("ROLLBACK");
            await client.query("DISCARD ALL");
          } catch {
            // A broken connection: closing it below frees what it held.
          }
          client.release(true);
        },
      };
    },
    ping: (timeoutMs) =>
      withTimeout(
        pool.query("select 1").then(() => {}),
        timeoutMs,
        "PostgreSQL",
      ),
    listen: (channel, handlers) => listenPostgres(base, channel, handlers, log),
    async close() {
      await pool.end();
      log.debug({ server }, "PostgreSQL pool closed");
    },
  };
  return createDatabase(driver);
}

/**
 * One statement over the extended protocol, as PGlite runs it: the same SQL behaves the same
 * on both (several statements in one `query` fail on both; `exec` runs scripts).
 */
async function run<R>(
  target: Pick<ClientBase, "query">,
  text: string,
  params: readonly unknown[] | undefined,
): Promise<QueryResult<R>> {
  const config: QueryConfig<unknown[]> & { queryMode: "extended" } = {
    text,
    values: params ? [...params] : [],
    queryMode: "extended",
  };
  const result: PgResult = await target.query(config);
  return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
}

async function createSchema(base: ClientConfig, schema: string): Promise<void> {
  const client = new Client(base);
  client.on("error", () => {}); // the failing call below reports it
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${escapeIdentifier(schema)}`);
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
