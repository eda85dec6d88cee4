import type { ClientBase, QueryResult as PgResult, Pool, PoolClient, QueryConfig } from "pg";
import { checkedName, type Lease } from "./database.js";
import type { Executor, QueryOptions, QueryResult } from "./types.js";
import { DatabaseTimeoutError, isConnectionError } from "./unavailable.js";

/**
 * Bounded use of `pg` connections (docs/architecture.md, "When the database does not
 * answer"): a connection within the acquire timeout, each statement within the statement
 * timeout, and a connection that failed or whose statement timed out here closed, never
 * pooled again (the late answer would otherwise reach the next user of the connection).
 */

/** A pooled connection within ms, a new one's set-up included; one that comes later goes back. */
export async function connectWithin(pool: Pool, ms: number): Promise<PoolClient> {
  let timer: NodeJS.Timeout | undefined;
  let gaveUp = false;
  const connecting = pool.connect();
  connecting.then(
    (client) => {
      if (gaveUp) client.release();
    },
    () => {}, // reported below, or after the caller stopped waiting
  );
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      gaveUp = true;
      reject(new DatabaseTimeoutError("connection", ms));
    }, ms);
    timer.unref();
  });
  try {
    return await Promise.race([connecting, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Gives a connection back after one piece of work: closed when the work broke it. */
export function releaseAfter(client: PoolClient, err?: unknown): void {
  client.release(err !== undefined && isConnectionError(err) ? (err as Error) : undefined);
}

/**
 * A connection held for a transaction or a session. Once a statement on it failed as a
 * connection (or timed out here), every later one fails at once, and release closes it
 * without the reset: the transaction ends there, and nothing waits on the connection again.
 * `timeoutMs` undefined: statements are not bounded (sessions, for maintenance).
 */
export function leaseOf(
  client: PoolClient,
  options: { timeoutMs: number | undefined; resetTimeoutMs: number; onRelease: () => void },
): Lease {
  const { timeoutMs } = options;
  let broken: Error | undefined;
  const guarded = async <T>(work: () => Promise<T>): Promise<T> => {
    if (broken) {
      throw new Error("Client has encountered a connection error and is not queryable", {
        cause: broken,
      });
    }
    try {
      return await work();
    } catch (err) {
      if (isConnectionError(err)) broken = err as Error;
      throw err;
    }
  };
  const conn: Executor = {
    query: (sql, params, queryOptions) =>
      guarded(() => runStatement(client, sql, params, timeoutMs, queryOptions)),
    exec: (script) => guarded(() => runScript(client, script, timeoutMs)),
  };
  return {
    conn,
    async release(reset) {
      options.onRelease();
      if (broken) return client.release(broken);
      if (!reset) return client.release();
      // Reset before closing, so that locks are free as soon as this resolves (closing
      // alone frees them only when the server notices). Closed rather than pooled again,
      // so the next connection also learns types a migration created (pgvector's).
      try {
        await runScript(client, "ROLLBACK", options.resetTimeoutMs);
        await runScript(client, "DISCARD ALL", options.resetTimeoutMs);
        client.release(true);
      } catch (err) {
        // A broken connection: closing it frees what it held.
        client.release(err instanceof Error ? err : true);
      }
    },
  };
}

type BoundedQuery = QueryConfig<unknown[]> & { query_timeout?: number };

/**
 * One statement over the extended protocol, as PGlite runs it: the same SQL behaves the same
 * on both (several statements in one `query` fail on both; `exec` runs scripts). With
 * timeoutMs, pg rejects with "Query read timeout" when no answer came in time. With
 * `prepareAs`, a named statement: pg parses it once per connection (and again on a new one)
 * and then only binds and executes it.
 */
export async function runStatement<R>(
  target: Pick<ClientBase, "query">,
  text: string,
  params: readonly unknown[] | undefined,
  timeoutMs: number | undefined,
  options?: QueryOptions,
): Promise<QueryResult<R>> {
  const config: BoundedQuery & { queryMode: "extended" } = {
    text,
    values: params ? [...params] : [],
    queryMode: "extended",
    ...(options?.prepareAs !== undefined ? { name: checkedName(options.prepareAs, text) } : {}),
    ...(timeoutMs ? { query_timeout: timeoutMs } : {}),
  };
  const result: PgResult = await target.query(config);
  return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
}

/** A parameterless script (simple protocol, several statements allowed). */
export async function runScript(
  target: Pick<ClientBase, "query">,
  text: string,
  timeoutMs: number | undefined,
): Promise<void> {
  const config: BoundedQuery = { text, ...(timeoutMs ? { query_timeout: timeoutMs } : {}) };
  await target.query(config);
}
