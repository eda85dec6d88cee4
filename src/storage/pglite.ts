import { mkdir } from "node:fs/promises";
import { PGlite, parse, protocol, type Results } from "@electric-sql/pglite";
import { vector } from "@electric-sql/pglite-pgvector";
import { fromSql } from "pgvector";
import type { Logger } from "../log.js";
import { checkedName, createDatabase, type Driver, withTimeout } from "./database.js";
import { type DirLock, lockDataDir } from "./dir-lock.js";
import { createMutex } from "./mutex.js";
import type { Database, Executor, QueryOptions, QueryResult } from "./types.js";

export interface PgliteOptions {
  /** A directory (created if missing) or "memory://". */
  dataDir: string;
  /** A data directory dump (PGlite `dumpDataDir`) to start from; tests use one to skip initdb. */
  template?: Blob;
  log: Logger;
}

/**
 * The embedded database: one PGlite (PostgreSQL in WebAssembly) with pgvector available.
 * PGlite is a single connection, so every statement, transaction and session takes one
 * lock in turn; a query from outside never runs inside someone else's transaction. A
 * directory is one process's at a time (src/storage/dir-lock.ts): a second open fails at
 * once with a DataDirLockedError naming the holder, before PGlite touches the files.
 */
export async function openPglite({ dataDir, template, log }: PgliteOptions): Promise<Database> {
  let dirLock: DirLock | undefined;
  if (!dataDir.includes("://")) {
    await mkdir(dataDir, { recursive: true });
    dirLock = lockDataDir(dataDir);
  }
  const started = performance.now();
  let pglite: PGlite;
  try {
    // int8 as pg returns it: a string (PGlite's default is a number or a bigint by size). Given
    // here, not per query, so that PGlite's array parsers (int8[]) use it too.
    pglite = await PGlite.create({
      dataDir,
      extensions: { vector },
      parsers: { 20: String },
      ...(template ? { loadDataDir: template } : {}),
    });
  } catch (err) {
    dirLock?.release();
    throw err;
  }
  log.debug(
    { dataDir, ms: Math.round(performance.now() - started) },
    "embedded database (PGlite) open",
  );

  // pgvector's types as number[] (as pgvector/pg does on pg), once a migration has created the
  // extension; their type ids differ per database. Set on the instance, not passed with each
  // query: PGlite copies its whole parser table (one entry per type and array type, hundreds)
  // into a new object for every query given parsers of its own, a few hundred microseconds on
  // the event loop per statement.
  async function refreshTypes(): Promise<void> {
    await pglite.refreshArrayTypes(); // arrays of types that migrations created
    const { rows } = await pglite.query<{ oid: number | string }>(
      "SELECT oid FROM pg_type WHERE typname IN ('vector', 'halfvec', 'sparsevec')",
    );
    for (const { oid } of rows) pglite.parsers[Number(oid)] = (value) => fromSql(value);
  }

  const prepared = preparedStatements(pglite);
  const conn: Executor = {
    async query<R>(
      sql: string,
      params?: readonly unknown[],
      options?: QueryOptions,
    ): Promise<QueryResult<R>> {
      try {
        if (options?.prepareAs !== undefined) {
          return toResult(await prepared.run<R>(options.prepareAs, sql, params ?? []));
        }
        return toResult(await pglite.query<R>(sql, params ? [...params] : undefined));
      } catch (err) {
        throw withoutParams(err);
      }
    },
    async exec(script) {
      try {
        await pglite.exec(script);
      } catch (err) {
        throw withoutParams(err);
      }
    },
  };

  const lock = createMutex();
  /** Channels listened on: DISCARD ALL (a session's reset) ends every LISTEN, so they are renewed. */
  const channels = new Map<string, number>();
  async function exclusive<T>(work: () => Promise<T>): Promise<T> {
    const unlock = await lock.acquire();
    try {
      return await work();
    } finally {
      unlock();
    }
  }
  try {
    await refreshTypes();
  } catch (err) {
    await pglite.close().catch(() => {});
    dirLock?.release();
    throw err;
  }

  const driver: Driver = {
    kind: "pglite",
    query: (sql, params, options) => exclusive(() => conn.query(sql, params, options)),
    exec: (script) => exclusive(() => conn.exec(script)),
    async acquire() {
      const unlock = await lock.acquire();
      return {
        conn,
        async release(reset) {
          try {
            // Leave nothing behind for the next holder: no open transaction, no session
            // settings or advisory locks, and new types (from migrations) known.
            if (reset) {
              await pglite.exec("ROLLBACK").catch(() => {});
              await pglite.exec("DISCARD ALL");
              prepared.forget(); // DISCARD ALL deallocated them
              for (const channel of channels.keys()) await pglite.exec(`LISTEN ${channel}`);
              await refreshTypes();
            }
          } catch (err) {
            log.error({ err: withoutParams(err) }, "embedded database: session reset failed");
          } finally {
            unlock();
          }
        },
      };
    },
    ping: (timeoutMs) =>
      withTimeout(
        exclusive(() => conn.query("select 1")).then(() => {}),
        timeoutMs,
        "embedded database",
      ),
    async listen(channel, handlers) {
      const onPayload = (payload: string) => handlers.onNotification(payload);
      const unlisten = await exclusive(() => pglite.listen(channel, onPayload));
      channels.set(channel, (channels.get(channel) ?? 0) + 1);
      let open = true;
      return {
        async close() {
          if (!open) return;
          open = false;
          const left = (channels.get(channel) ?? 1) - 1;
          if (left > 0) channels.set(channel, left);
          else channels.delete(channel);
          await exclusive(() => unlisten()).catch(() => {});
        },
      };
    },
    async close() {
      try {
        await exclusive(() => pglite.close());
      } finally {
        dirLock?.release();
      }
      log.debug({ dataDir }, "embedded database closed");
    },
  };
  return createDatabase(driver);
}

const { serialize } = protocol;

/** SQLSTATE invalid_sql_statement_name: the prepared statement is not there (any more). */
const noSuchStatement = "26000";

/**
 * Named prepared statements on PGlite (QueryOptions.prepareAs), through its wire protocol as
 * its own `query` speaks it, but parsed once: Parse and Describe on first use, then Bind,
 * Describe (the portal's columns, for the result's parsers) and Execute in one message, and
 * Sync. `query` parses and plans its statement on every call (about 1.3 ms for the audit
 * append in WebAssembly). Run inside the driver's lock, like every other statement.
 */
function preparedStatements(pglite: PGlite) {
  /** Name → its parameter types, for the statements prepared on this instance. */
  const statements = new Map<string, { paramTypes: number[] }>();

  /** Sends messages, then Sync whatever happened (the backend skips to it after an error). */
  async function exchange(...messages: Uint8Array[]) {
    const results = [];
    try {
      for (const message of messages) {
        results.push(...(await pglite.execProtocolStream(message, { syncToFs: false })));
      }
    } finally {
      results.push(...(await pglite.execProtocolStream(serialize.sync(), { syncToFs: false })));
    }
    return results;
  }

  async function prepare(name: string, text: string): Promise<number[]> {
    const known = statements.get(name);
    if (known !== undefined) return known.paramTypes;
    const described = await exchange(
      serialize.parse({ name, text }),
      serialize.describe({ type: "S", name }),
    );
    const paramTypes = parse.parseDescribeStatementResults(described);
    statements.set(name, { paramTypes });
    return paramTypes;
  }

  async function execute<R>(name: string, text: string, params: readonly unknown[]) {
    const paramTypes = await prepare(name, text);
    const values = params.map((value, i) => {
      if (value === null || value === undefined) return null;
      const serializer = pglite.serializers[paramTypes[i] ?? 0];
      return serializer ? serializer(value) : String(value);
    });
    const bound = [
      serialize.bind({ statement: name, values }),
      serialize.describe({ type: "P" }),
      serialize.execute({}),
    ];
    const messages = await exchange(Buffer.concat(bound));
    await pglite.syncToFs();
    const [result] = parse.parseResults(messages, pglite.parsers) as Results<R>[];
    if (result === undefined) throw new Error(`prepared statement "${name}" gave no result`);
    return result;
  }

  return {
    run<R>(name: string, text: string, params: readonly unknown[]): Promise<Results<R>> {
      checkedName(name, text);
      return pglite.runExclusive(async () => {
        try {
          return await execute<R>(name, text, params);
        } catch (err) {
          if ((err as { code?: unknown }).code !== noSuchStatement) throw err;
          // Deallocated behind this cache's back (DEALLOCATE or DISCARD ALL in a script).
          statements.delete(name);
          // Inside a transaction the failed Bind aborted it: the caller gets the error, and
          // the statement is prepared again at its next use.
          if (pglite.isInTransaction()) throw err;
          return execute<R>(name, text, params);
        }
      });
    },
    /** After DISCARD ALL: none is prepared any more. */
    forget(): void {
      statements.clear();
    },
  };
}

function toResult<R>(result: Results<R>): QueryResult<R> {
  // `rowCount` is the command tag's count (rows returned or affected), as pg reports it.
  const tagged = (result as { rowCount?: number }).rowCount;
  return { rows: result.rows, rowCount: tagged ?? result.affectedRows ?? result.rows.length };
}

/** PGlite attaches the query's parameters to its errors; they must never reach a log line. */
function withoutParams(err: unknown): unknown {
  if (err instanceof Error && "params" in err) {
    delete (err as { params?: unknown }).params;
    delete (err as { queryOptions?: unknown }).queryOptions;
  }
  return err;
}
