import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate, readMigrations } from "../../src/storage/index.js";
import { migrationLockKey, migrationsDirectory } from "../../src/storage/migrate.js";
import { databaseTargets, openTestPostgres, testSchemaName } from "../support/database.js";
import { raceForAdvisoryLock } from "../support/lock-race.js";

const usersFile = join(migrationsDirectory(), "0001_users.sql");

describe.each(databaseTargets())("migrations on $name", (target) => {
  let db: Database;
  beforeEach(async () => {
    db = await target.open();
  });
  afterEach(async () => {
    await db.close();
  });

  it("applies 0001 once, records version, name and checksum; a second run applies nothing", async () => {
    const all = (await readMigrations(migrationsDirectory())).map((m) => m.version);
    expect(all[0]).toBe("0001");
    expect(await migrate(db, silentLogger)).toEqual({ applied: all });
    expect(await migrate(db, silentLogger)).toEqual({ applied: [] });

    const { rows } = await db.query<{ version: string; name: string; checksum: string }>(
      "SELECT version, name, checksum FROM schema_migrations ORDER BY version",
    );
    const sha256 = createHash("sha256").update(await readFile(usersFile, "utf8"));
    expect(rows[0]).toEqual({ version: "0001", name: "users", checksum: sha256.digest("hex") });
    expect(rows.map((row) => row.version)).toEqual(all);
  });

  it("refuses to start when an applied migration's file has changed, naming it", async () => {
    await migrate(db, silentLogger);
    await db.query("UPDATE schema_migrations SET checksum = $1 WHERE version = '0001'", [
      "0".repeat(64),
    ]);
    await expect(migrate(db, silentLogger)).rejects.toThrow(/0001_users\.sql.*changed/);
  });

  it("enforces unique usernames regardless of case", async () => {
    await migrate(db, silentLogger);
    const insert =
      "INSERT INTO users (id, username, password_hash) VALUES (gen_random_uuid(), $1, 'h')";
    await db.query(insert, ["Alice"]);
    await expect(db.query(insert, ["alice"])).rejects.toMatchObject({ code: "23505" });
    const { rows } = await db.query("SELECT username, email, roles, is_active FROM users");
    expect(rows).toEqual([{ username: "Alice", email: "", roles: [], is_active: true }]);
  });

  describe("from a directory", () => {
    let dir: string;
    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), "tg-migrations-"));
    });
    afterEach(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    it("applies in version order; a failing migration leaves nothing and names its file", async () => {
      await writeFile(join(dir, "0002_second.sql"), "INSERT INTO a VALUES (2);");
      await writeFile(
        join(dir, "0001_first.sql"),
        "CREATE TABLE a (n int);\nINSERT INTO a VALUES (1);",
      );
      await writeFile(
        join(dir, "0003_broken.sql"),
        "CREATE TABLE b (n int);\nSELECT * FROM missing;",
      );
      const options = { directory: dir, table: "test_migrations" };
      await expect(migrate(db, silentLogger, options)).rejects.toThrow(/0003_broken\.sql failed/);

      const versions = await db.query("SELECT version FROM test_migrations ORDER BY version");
      expect(versions.rows).toEqual([{ version: "0001" }, { version: "0002" }]);
      expect((await db.query("SELECT n FROM a ORDER BY n")).rows).toEqual([{ n: 1 }, { n: 2 }]);
      const b = await db.query(
        "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'b'",
      );
      expect(b.rowCount).toBe(0);

      await writeFile(join(dir, "0003_broken.sql"), "CREATE TABLE b (n int);");
      expect(await migrate(db, silentLogger, options)).toEqual({ applied: ["0003"] });
    });

    it("parses types a migration created, such as pgvector's, as number[]", async (context) => {
      const available = await db.query(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'",
      );
      if (available.rowCount === 0) context.skip("pgvector is not installed on this server");
      await writeFile(
        join(dir, "0001_vectors.sql"),
        "CREATE EXTENSION IF NOT EXISTS vector;\nCREATE TABLE e (v vector(3));",
      );
      await migrate(db, silentLogger, { directory: dir });
      await db.query("INSERT INTO e VALUES ($1)", ["[1,2.5,3]"]);
      expect((await db.query("SELECT v FROM e")).rows).toEqual([{ v: [1, 2.5, 3] }]);
      await db.transaction(async (tx) => {
        expect((await tx.query("SELECT v FROM e")).rows).toEqual([{ v: [1, 2.5, 3] }]);
      });
    });

    it("refuses misnamed and duplicate migration files", async () => {
      await writeFile(join(dir, "1_first.sql"), "SELECT 1;");
      await expect(migrate(db, silentLogger, { directory: dir })).rejects.toThrow(/1_first\.sql/);
      await rm(join(dir, "1_first.sql"));
      await writeFile(join(dir, "0001_a.sql"), "SELECT 1;");
      await writeFile(join(dir, "0001_b.sql"), "SELECT 1;");
      await expect(migrate(db, silentLogger, { directory: dir })).rejects.toThrow(/0001/);
    });
  });
});

const url = process.env.TEST_DATABASE_URL?.trim();

describe.skipIf(!url)("migrations from two processes on one PostgreSQL schema", () => {
  const child = fileURLToPath(new URL("./migrate-child.ts", import.meta.url));

  function runChild(
    connection: string,
    schema: string,
  ): Promise<{ code: number | null; out: string; err: string }> {
    return new Promise((resolve, reject) => {
      const proc = spawn(process.execPath, ["--import", "tsx", child], {
        env: { ...process.env, MIGRATE_URL: connection, MIGRATE_SCHEMA: schema },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      proc.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
      });
      proc.stderr.on("data", (chunk: Buffer) => {
        err += chunk.toString();
      });
      proc.on("error", reject);
      proc.on("close", (code) => resolve({ code, out, err }));
    });
  }

  it("applies each migration exactly once", async () => {
    const base = url ?? "";
    const schema = testSchemaName();
    // The children name themselves, so that we can see them wait for the migration lock.
    const appName = `tg_migrate_${schema}`;
    const connection = `${base}${base.includes("?") ? "&" : "?"}application_name=${appName}`;
    const db = await openTestPostgres(base, schema);
    try {
      // Hold the migration lock until both children wait for it, then let them race.
      const results = await raceForAdvisoryLock(db, migrationLockKey, appName, () => [
        runChild(connection, schema),
        runChild(connection, schema),
      ]);

      for (const result of results) expect(result, result.err).toMatchObject({ code: 0 });
      const applied = results.map(
        (result) => (JSON.parse(result.out) as { applied: string[] }).applied,
      );
      const all = (await readMigrations(migrationsDirectory())).map((m) => m.version);
      expect(applied.flat().sort()).toEqual(all);
      expect(applied.map((versions) => versions.length).sort()).toEqual([0, all.length]);

      const { rows } = await db.query<{ version: string; n: number }>(
        "SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version ORDER BY version",
      );
      expect(rows).toEqual(all.map((version) => ({ version, n: 1 })));
    } finally {
      await db.close();
    }
  });
});
