import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { scopeChecksByDefault } from "../../src/storage/database.js";
import { type Database, openDatabase } from "../../src/storage/index.js";
import { databaseTargets, testSchemaName } from "../support/database.js";

describe.each(databaseTargets())("database on $name", (target) => {
  let db: Database;
  beforeEach(async () => {
    db = await target.open();
    await db.exec("CREATE TABLE t (v text NOT NULL)");
  });
  afterEach(async () => {
    await db.close();
  });

  const values = async () =>
    (await db.query<{ v: string }>("SELECT v FROM t ORDER BY v")).rows.map((row) => row.v);

  it("passes parameters separately and returns typed rows", async () => {
    const quote = "it's; DROP TABLE t; --";
    const { rows, rowCount } = await db.query<{ a: string; b: number; c: string[] }>(
      "SELECT $1::text AS a, $2::int AS b, $3::text[] AS c",
      [quote, 42, ["x", "y"]],
    );
    expect(rows).toEqual([{ a: quote, b: 42, c: ["x", "y"] }]);
    expect(rowCount).toBe(1);
    expect(await values()).toEqual([]);
  });

  it("reports rows returned or affected as rowCount, never null", async () => {
    expect((await db.query("INSERT INTO t VALUES ('a'), ('b'), ('c')")).rowCount).toBe(3);
    expect((await db.query("UPDATE t SET v = v || '!' WHERE v <> 'a'")).rowCount).toBe(2);
    expect((await db.query("DELETE FROM t WHERE v = 'zzz'")).rowCount).toBe(0);
    expect((await db.query("SELECT v FROM t")).rowCount).toBe(3);
    expect((await db.query("CREATE INDEX t_v ON t (v)")).rowCount).toBe(0);
  });

  it("returns the same values on both drivers (int8 as a string)", async () => {
    const { rows } = await db.query(
      "SELECT count(*) AS n, ARRAY[1, 2]::int8[] AS ids, 2.5::float8 AS f, true AS b, " +
        "'2024-01-02T03:04:05Z'::timestamptz AS at, '{\"k\": [1]}'::jsonb AS j",
    );
    expect(rows[0]).toEqual({
      n: "1",
      ids: ["1", "2"],
      f: 2.5,
      b: true,
      at: new Date("2024-01-02T03:04:05Z"),
      j: { k: [1] },
    });
  });

  it("runs one statement per query and scripts through exec", async () => {
    await expect(db.query("SELECT 1; SELECT 2")).rejects.toThrow();
    await db.exec("INSERT INTO t VALUES ('a'); INSERT INTO t VALUES ('b');");
    expect(await values()).toEqual(["a", "b"]);
  });

  it("keeps parameters off its errors (they end up in logs)", async () => {
    const error = await db
      .query("SELECT $1::text FROM missing_table", ["secret-value"])
      .catch((err: unknown) => err);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ code: "42P01" });
    expect(JSON.stringify({ ...(error as object) })).not.toContain("secret-value");
  });

  it("commits a transaction and returns its value", async () => {
    const result = await db.transaction(async (tx) => {
      await tx.query("INSERT INTO t VALUES ($1)", ["a"]);
      await tx.query("INSERT INTO t VALUES ($1)", ["b"]);
      return (await tx.query("SELECT count(*)::int AS n FROM t")).rows[0];
    });
    expect(result).toEqual({ n: 2 });
    expect(await values()).toEqual(["a", "b"]);
  });

  it("rolls back everything when the transaction throws, and rethrows", async () => {
    const failure = new Error("boom");
    await expect(
      db.transaction(async (tx) => {
        await tx.query("INSERT INTO t VALUES ('a')");
        throw failure;
      }),
    ).rejects.toBe(failure);
    await expect(
      db.transaction(async (tx) => {
        await tx.query("INSERT INTO t VALUES ('b')");
        await tx.query("INSERT INTO t VALUES (NULL)"); // not-null violation
      }),
    ).rejects.toMatchObject({ code: "23502" });
    expect(await values()).toEqual([]);
    // The connection is usable again.
    await db.transaction((tx) => tx.query("INSERT INTO t VALUES ('c')"));
    expect(await values()).toEqual(["c"]);
  });

  it("keeps queries from outside out of an open transaction", async () => {
    let entered = () => {};
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const transaction = db.transaction(async (tx) => {
      await tx.query("INSERT INTO t VALUES ('inside')");
      entered();
      await new Promise((resolve) => setTimeout(resolve, 100));
      throw new Error("roll back");
    });
    await inside;
    // Issued while the transaction is open: they neither see its row nor join it (the
    // insert below survives its rollback).
    const outside = (async () => {
      const seen = await values();
      await db.query("INSERT INTO t VALUES ('outside')");
      return seen;
    })();
    await expect(transaction).rejects.toThrow("roll back");
    expect(await outside).toEqual([]);
    expect(await values()).toEqual(["outside"]);
  });

  it("refuses the database itself inside a transaction, and the handle after it", async () => {
    let handle: { query(sql: string): Promise<unknown> } | undefined;
    await expect(
      db.transaction(async (tx) => {
        handle = tx;
        await tx.query("INSERT INTO t VALUES ('a')");
        await db.query("SELECT 1");
      }),
    ).rejects.toThrow(/inside a transaction/);
    expect(await values()).toEqual([]);
    await expect(handle?.query("SELECT 1")).rejects.toThrow(/after the transaction ended/);
  });

  it("holds one connection for a session and frees its locks afterwards", async () => {
    const pid = await db.session(async (session) => {
      await session.query("SELECT pg_advisory_lock(4242)");
      await session.transaction((tx) => tx.query("INSERT INTO t VALUES ('a')"));
      const { rows } = await session.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      return rows[0]?.pid;
    });
    expect(pid).toEqual(expect.any(Number));
    expect(await values()).toEqual(["a"]);
    const { rows } = await db.query<{ ok: boolean }>("SELECT pg_try_advisory_lock(4242) AS ok");
    expect(rows[0]?.ok).toBe(true);
    await db.query("SELECT pg_advisory_unlock(4242)");
  });

  it("answers ping, and refuses everything once closed", async () => {
    await expect(db.ping()).resolves.toBeUndefined();
    await db.close();
    await expect(db.ping()).rejects.toThrow(/closed/);
    await expect(db.query("SELECT 1")).rejects.toThrow(/closed/);
    await db.close(); // idempotent
  });
});

const url = process.env.TEST_DATABASE_URL?.trim();

describe.skipIf(!url)("openDatabase on PostgreSQL", () => {
  it("bounds statements by the statement timeout and uses the schema first", async () => {
    const schema = testSchemaName();
    const db = await openDatabase({
      connection: url,
      schema,
      statementTimeoutMs: 200,
      poolSize: 2,
      log: silentLogger,
    });
    try {
      const { rows } = await db.query<{ search_path: string }>("SHOW search_path");
      expect(rows[0]?.search_path).toBe(`${schema},public`);
      // Whichever ends it first, the server's statement_timeout or the client's own timer.
      await expect(db.query("SELECT pg_sleep(1)")).rejects.toMatchObject({
        reason: "DATABASE_UNAVAILABLE",
      });
      await db.exec("CREATE TABLE here (v int)");
      const where = await db.query("SELECT schemaname FROM pg_tables WHERE tablename = 'here'");
      expect(where.rows).toEqual([{ schemaname: schema }]);
    } finally {
      await db.exec(`DROP SCHEMA ${schema} CASCADE`);
      await db.close();
    }
  });
});

describe("openDatabase", () => {
  it("refuses a connection that is not a postgres:// URL, naming DB_CONNECTION only", async () => {
    for (const connection of ["mysql://root:hunter2@db/x", "", "127.0.0.1:5432"]) {
      const opening = openDatabase({ connection, log: silentLogger });
      await expect(opening).rejects.toThrow(/DB_CONNECTION/);
      await expect(opening).rejects.not.toThrow(/hunter2/);
    }
  });

  it("refuses a schema name that is not a plain identifier", async () => {
    const connection = "postgres://postgres@127.0.0.1:1/test";
    for (const schema of ["Public", "a-b", "x; DROP SCHEMA public", "1abc"]) {
      await expect(openDatabase({ connection, schema, log: silentLogger })).rejects.toThrow(
        /schema name/,
      );
    }
  });

  it("ping rejects within its timeout when PostgreSQL refuses the connection", async () => {
    const db = await openDatabase({
      connection: "postgres://postgres@127.0.0.1:1/test",
      acquireTimeoutMs: 500,
      log: silentLogger,
    });
    const started = performance.now();
    await expect(db.ping(1000)).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(1500);
    await db.close();
  });

  describe("against a server that accepts and never answers", () => {
    let server: Server;
    const sockets = new Set<Socket>();
    beforeEach(async () => {
      server = createServer((socket) => {
        sockets.add(socket);
        socket.on("error", () => {});
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    });
    afterEach(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    });

    it("ping rejects at its timeout and close waits only for the connect timeout", async () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      const db = await openDatabase({
        connection: `postgres://postgres@127.0.0.1:${port}/test`,
        acquireTimeoutMs: 800,
        log: silentLogger,
      });
      let started = performance.now();
      await expect(db.ping(300)).rejects.toThrow(/within 300 ms/);
      expect(performance.now() - started).toBeLessThan(700);
      started = performance.now();
      await db.close();
      expect(performance.now() - started).toBeLessThan(1500);
    });
  });

  it("opens PGlite in a data directory it creates, and keeps the data", async () => {
    const root = await mkdtemp(join(tmpdir(), "tg-pglite-"));
    const dataDir = join(root, "nested", "data");
    try {
      const first = await openDatabase({ dataDir, log: silentLogger });
      expect(first.kind).toBe("pglite");
      await first.exec("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('x')");
      await first.close();
      const second = await openDatabase({ dataDir, log: silentLogger });
      expect((await second.query("SELECT v FROM kept")).rows).toEqual([{ v: "x" }]);
      await second.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe("scope checks", () => {
  it("run under the tests and when asked for, not in production by default", () => {
    expect(scopeChecksByDefault({ NODE_ENV: "test" })).toBe(true);
    expect(scopeChecksByDefault({ TRAITGATE_DB_SCOPE_CHECKS: "1" })).toBe(true);
    expect(scopeChecksByDefault({})).toBe(false);
    expect(scopeChecksByDefault({ NODE_ENV: "production" })).toBe(false);
  });
});
