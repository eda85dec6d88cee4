import type { Logger } from "../log.js";
import type { ListenHandlers, NotificationSubscription } from "./notify.js";

export interface QueryResult<R> {
  rows: R[];
  /** Rows returned (SELECT) or affected (INSERT, UPDATE, DELETE); never null. */
  rowCount: number;
}

/** How to run one statement. */
export interface QueryOptions {
  /**
   * Keep the statement parsed and planned under this name on each connection (a prepared
   * statement), for a statement on a hot path whose text is fixed: the database parses and
   * plans it once per connection, not on every call. One name, one text, for the life of
   * the process; names start with `traitgate_`. Both drivers prepare it (docs/architecture.md,
   * "Prepared statements").
   */
  prepareAs?: string;
}

export interface Queryable {
  /** One statement; parameters as $1, $2, ... (never interpolated into the text). */
  query<R = Record<string, unknown>>(
    sql: string,
    params?: readonly unknown[],
    options?: QueryOptions,
  ): Promise<QueryResult<R>>;
}

/** A handle that can also run a parameterless script of several statements (migrations). */
export interface Executor extends Queryable {
  exec(script: string): Promise<void>;
}

/** One connection held for a while; see {@link Database.session}. */
export interface Session extends Executor {
  /** BEGIN, fn, COMMIT; ROLLBACK and rethrow if fn throws. Transactions do not nest. */
  transaction<T>(fn: (tx: Executor) => Promise<T>): Promise<T>;
}

/** A PostgreSQL connection pool's state now, and its connections that failed so far. */
export interface PoolStats {
  /** Connections open (idle and in use). */
  total: number;
  idle: number;
  /** Callers waiting for a connection. */
  waiting: number;
  /** The pool's size. */
  max: number;
  /** Connections that failed, idle or in use (the server went away, the network broke). */
  failedConnections: number;
}

/** What the database handle has seen (metrics: docs/operations.md). */
export interface DatabaseStats {
  /** PostgreSQL's pool; undefined on PGlite (one connection in the process, no pool). */
  pool: PoolStats | undefined;
  /** Statements or connection requests that failed: the database did not answer in time. */
  timeouts: number;
  /** Those that failed because the database could not be reached or the connection broke. */
  connectionErrors: number;
}

export interface Database extends Session {
  readonly kind: "pglite" | "postgres";
  /** Counts of failures so far and the pool's state; cheap, for metrics. */
  stats(): DatabaseStats;
  /**
   * Runs fn on one connection held for its whole duration, so session state (an advisory
   * lock, a SET) stays on it. On PostgreSQL the connection is closed afterwards rather than
   * returned to the pool, so no session state leaks; on PGlite the session is reset.
   *
   * Inside `transaction` and `session`, use only the handle passed to fn: calling the
   * database itself there throws (on PGlite it would wait for fn forever).
   *
   * A session is for maintenance (migrations, index builds): its statements are not bounded
   * by the statement timeout, which bounds every other statement.
   */
  session<T>(fn: (session: Session) => Promise<T>): Promise<T>;
  /** Resolves when the database answers `select 1` within timeoutMs (default 2000). */
  ping(timeoutMs?: number): Promise<void>;
  /**
   * LISTEN on `channel` ([a-z_][a-z0-9_]*) until the subscription is closed; see
   * src/storage/notify.ts. Send with `SELECT pg_notify($1, $2)` in a transaction.
   */
  listen(channel: string, handlers: ListenHandlers): Promise<NotificationSubscription>;
  /** Waits for running work, then closes. Idempotent; later calls on the handle reject. */
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /**
   * postgres:// or postgresql:// URL → PostgreSQL through a `pg` pool. Unset → embedded
   * PGlite. Anything else (also "") → an Error naming DB_CONNECTION.
   */
  connection?: string | undefined;
  /** PGlite data directory (default ./data), "memory://" for in-memory. Ignored for pg. */
  dataDir?: string;
  /** pg only: schema to use as search_path, created if missing ([a-z_][a-z0-9_]*). */
  schema?: string;
  /**
   * pg only: the longest wait for a connection, from the pool or a new one (default 5000 ms;
   * the core passes DB_ACQUIRE_TIMEOUT_MS). Then DATABASE_UNAVAILABLE.
   */
  acquireTimeoutMs?: number;
  /**
   * pg only: the longest a statement may take, enforced by the server (statement_timeout)
   * and by the client, also when the server does not answer at all (default 30000 ms; the
   * core passes DB_STATEMENT_TIMEOUT_MS). Then DATABASE_UNAVAILABLE. Sessions are exempt.
   */
  statementTimeoutMs?: number;
  /** pg only: pool size (default 10). */
  poolSize?: number;
  /** Never receives SQL parameters (they may hold secrets or personal data). */
  log: Logger;
}
