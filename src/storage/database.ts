import { AsyncLocalStorage } from "node:async_hooks";
import { checkChannel, type ListenHandlers, type NotificationSubscription } from "./notify.js";
import type { Database, Executor, PoolStats, QueryOptions, QueryResult, Session } from "./types.js";
import { asUnavailable, unavailableKind } from "./unavailable.js";

/** One connection taken from a driver for a transaction or a session. */
export interface Lease {
  readonly conn: Executor;
  /** Gives the connection back; `reset` when its session state is unknown or broken. */
  release(reset: boolean): Promise<void>;
}

/** What each driver provides; transactions, sessions and guards are built on top, once. */
export interface Driver {
  readonly kind: Database["kind"];
  query<R>(
    sql: string,
    params: readonly unknown[] | undefined,
    options?: QueryOptions,
  ): Promise<QueryResult<R>>;
  exec(script: string): Promise<void>;
  /** `unbounded`: statements on it may take as long as they need (sessions: maintenance). */
  acquire(options?: { unbounded?: boolean }): Promise<Lease>;
  ping(timeoutMs: number): Promise<void>;
  listen(channel: string, handlers: ListenHandlers): Promise<NotificationSubscription>;
  close(): Promise<void>;
  /** The connection pool's state, where there is one (PostgreSQL). */
  pool?(): PoolStats;
}

interface Scope {
  readonly what: "transaction" | "session";
  open: boolean;
  /** A session's transaction is running: the session handle itself must wait its turn. */
  busy: boolean;
}

/**
 * Whether `db.query` inside a transaction or session is refused (a programming error: on pg
 * it would run outside the transaction, on PGlite it would wait for it forever). The check
 * needs an AsyncLocalStorage, which turns on promise hooks for the whole process and costs
 * about a tenth of a small request's time, so it runs where the mistakes are caught: under
 * the tests (NODE_ENV=test), or with TRAITGATE_DB_SCOPE_CHECKS=1.
 */
export const scopeChecksByDefault = (env: NodeJS.ProcessEnv = process.env): boolean =>
  env.NODE_ENV === "test" || env.TRAITGATE_DB_SCOPE_CHECKS === "1";

export function createDatabase(driver: Driver, options: { scopeChecks?: boolean } = {}): Database {
  const scopes =
    (options.scopeChecks ?? scopeChecksByDefault()) ? new AsyncLocalStorage<Scope>() : undefined;
  const within = <T>(scope: Scope, fn: () => T): T => (scopes ? scopes.run(scope, fn) : fn());
  let closing: Promise<void> | undefined;
  const failures = { timeouts: 0, connectionErrors: 0 };
  /** Driver failures that mean "unavailable" become DATABASE_UNAVAILABLE, counted once. */
  const mapUnavailable = <T>(work: Promise<T>): Promise<T> =>
    work.catch((err: unknown) => {
      const kind = unavailableKind(err);
      if (kind === "timeout") failures.timeouts++;
      else if (kind === "connection") failures.connectionErrors++;
      throw asUnavailable(err);
    });

  const enter = () => {
    if (closing) throw new Error("database is closed");
    const scope = scopes?.getStore();
    if (scope?.open) {
      throw new Error(
        `database used directly inside a ${scope.what}: use the handle passed to the callback`,
      );
    }
  };

  const use = (scope: Scope) => {
    if (!scope.open) throw new Error(`${scope.what} handle used after the ${scope.what} ended`);
    if (scope.busy) throw new Error("session handle used while its transaction is running");
  };

  const handle = (conn: Executor, scope: Scope): Executor => ({
    async query<R>(sql: string, params?: readonly unknown[], options?: QueryOptions) {
      use(scope);
      return conn.query<R>(sql, params, options);
    },
    async exec(script) {
      use(scope);
      return conn.exec(script);
    },
  });

  /** BEGIN, fn, COMMIT or ROLLBACK on conn; `broken` is called when the connection is unusable. */
  async function inTransaction<T>(
    conn: Executor,
    fn: (tx: Executor) => Promise<T>,
    broken: () => void,
  ): Promise<T> {
    const scope: Scope = { what: "transaction", open: true, busy: false };
    try {
      await conn.exec("BEGIN");
    } catch (err) {
      broken();
      throw err;
    }
    try {
      const value = await within(scope, () => fn(handle(conn, scope)));
      scope.open = false;
      await conn.exec("COMMIT");
      return value;
    } catch (err) {
      scope.open = false;
      await conn.exec("ROLLBACK").catch(broken);
      throw err;
    }
  }

  return {
    kind: driver.kind,

    stats: () => ({ pool: driver.pool?.(), ...failures }),

    // Connection failures become DATABASE_UNAVAILABLE (src/storage/unavailable.ts).
    async query<R>(sql: string, params?: readonly unknown[], options?: QueryOptions) {
      enter();
      return mapUnavailable(driver.query<R>(sql, params, options));
    },

    async exec(script) {
      enter();
      return mapUnavailable(driver.exec(script));
    },

    async transaction(fn) {
      enter();
      const lease = await mapUnavailable(driver.acquire());
      let reset = false;
      try {
        return await mapUnavailable(
          inTransaction(lease.conn, fn, () => {
            reset = true;
          }),
        );
      } finally {
        await lease.release(reset);
      }
    },

    async session(fn) {
      enter();
      const lease = await mapUnavailable(driver.acquire({ unbounded: true }));
      const scope: Scope = { what: "session", open: true, busy: false };
      const session: Session = {
        ...handle(lease.conn, scope),
        async transaction(txFn) {
          use(scope);
          scope.busy = true;
          try {
            return await inTransaction(lease.conn, txFn, () => {});
          } finally {
            scope.busy = false;
          }
        },
      };
      try {
        return await within(scope, () => fn(session));
      } finally {
        scope.open = false;
        await lease.release(true);
      }
    },

    async ping(timeoutMs = 2000) {
      enter();
      return driver.ping(timeoutMs);
    },

    async listen(channel, handlers) {
      enter();
      checkChannel(channel);
      return driver.listen(channel, handlers);
    },

    close() {
      closing ??= driver.close();
      return closing;
    },
  };
}

const statementName = /^traitgate_[a-z0-9_]{1,50}$/;
/** Each prepared statement's text, by name, for the whole process (both drivers). */
const preparedTexts = new Map<string, string>();

/**
 * A prepared statement's name as QueryOptions says: `traitgate_` and [a-z0-9_], and one text
 * per name in this process (pg alone would check it per connection only).
 */
export function checkedName(name: string, text: string): string {
  if (!statementName.test(name)) {
    throw new Error(`invalid prepared statement name "${name}": use traitgate_[a-z0-9_]+`);
  }
  const known = preparedTexts.get(name);
  if (known === undefined) preparedTexts.set(name, text);
  else if (known !== text) {
    throw new Error(`prepared statement "${name}" was used for a different statement`);
  }
  return name;
}

/** Rejects with a timeout Error unless work settles within ms; the timer never holds the process. */
export function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
    timer.unref();
  });
  work.catch(() => {}); // a late failure after the timeout is not unhandled
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
