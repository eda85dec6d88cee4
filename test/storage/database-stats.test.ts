import type { AddressInfo } from "node:net";
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { openDatabase } from "../../src/storage/index.js";
import { openTestPostgres, pgliteTarget } from "../support/database.js";

/**
 * What the database handle counts for metrics (docs/operations.md): calls that failed as
 * unavailable, by kind, and PostgreSQL's pool.
 */

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe("database stats", () => {
  it("PGlite: no pool, no failures", async () => {
    const db = await pgliteTarget.open();
    try {
      await db.query("SELECT 1");
      expect(db.stats()).toEqual({ pool: undefined, timeouts: 0, connectionErrors: 0 });
    } finally {
      await db.close();
    }
  });

  it("PostgreSQL that cannot be reached: each failed call counted once as a connection error", async () => {
    const db = await openDatabase({
      connection: `postgres://traitgate@127.0.0.1:${await closedPort()}/none`,
      acquireTimeoutMs: 2000,
      log: silentLogger,
    });
    try {
      await expect(db.query("SELECT 1")).rejects.toMatchObject({ reason: "DATABASE_UNAVAILABLE" });
      await expect(db.transaction((tx) => tx.query("SELECT 1"))).rejects.toMatchObject({
        reason: "DATABASE_UNAVAILABLE",
      });
      expect(db.stats()).toMatchObject({ timeouts: 0, connectionErrors: 2 });
      expect(db.stats().pool).toMatchObject({ total: 0, waiting: 0, max: 10 });
    } finally {
      await db.close();
    }
  });

  const url = process.env.TEST_DATABASE_URL?.trim();
  it.skipIf(!url)("PostgreSQL: the pool's connections, and a statement timeout", async () => {
    const db = await openTestPostgres(url ?? "");
    try {
      await Promise.all([db.query("SELECT 1"), db.query("SELECT 2"), db.query("SELECT 3")]);
      const { pool } = db.stats();
      expect(pool?.total).toBeGreaterThanOrEqual(1);
      expect(pool?.idle).toBe(pool?.total);
      expect(pool).toMatchObject({ waiting: 0, max: 10, failedConnections: 0 });
      // The server cancels the statement (statement_timeout): a timeout, not a connection error.
      await expect(
        db.transaction(async (tx) => {
          await tx.exec("SET LOCAL statement_timeout = 50");
          await tx.query("SELECT pg_sleep(2)");
        }),
      ).rejects.toMatchObject({ reason: "DATABASE_UNAVAILABLE" });
      expect(db.stats()).toMatchObject({ timeouts: 1, connectionErrors: 0 });
    } finally {
      await db.close();
    }
  });
});
