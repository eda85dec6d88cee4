import { mkdir } from "node:fs/promises";
import { PGlite, type Results } from "@electric-sql/pglite";
import { vector } from "@electric-sql/pglite-pgvector";
import { fromSql } from "pgvector";
import type { Logger } from "../log.js";
import { createDatabase, type Driver, withTimeout } from "./database.js";
import { type DirLock, lockDataDir } from "./dir-lock.js";
import { createMutex } from "./mutex.js";
import type { Database, Executor, QueryResult } from "./types.js";

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

  const conn: Executor = {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      try {
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
    query: (sql, params) => exclusive(() => conn.query(sql, params)),
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
