import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "../log.js";
import type { Database, Session } from "./types.js";

export interface Migration {
  /** "0001" */
  version: string;
  /** "users" */
  name: string;
  file: string;
  sql: string;
  /** sha256 (hex) of the file, line endings normalized to \n. */
  checksum: string;
}

export interface MigrateOptions {
  /** Directory of NNNN_name.sql files; default src/storage/migrations of this package. */
  directory?: string;
  /** Table recording applied migrations; default schema_migrations. */
  table?: string;
}

/** pg_advisory_lock key taken while migrating; one fixed value for every traitgate process. */
export const migrationLockKey = 7_283_431_109n;
const lockKey = migrationLockKey;
const fileName = /^(\d{4})_([a-z0-9_]+)\.sql$/;
const identifier = /^[a-z_][a-z0-9_]*$/;

/**
 * Applies pending migrations in version order, each in its own transaction, all under one
 * advisory lock, so processes starting together apply each migration exactly once. Refuses to
 * run (naming the file) when an applied migration's file has changed. Returns the versions
 * applied now.
 */
export async function migrate(
  db: Database,
  log: Logger,
  options: MigrateOptions = {},
): Promise<{ applied: string[] }> {
  const table = options.table ?? "schema_migrations";
  if (!identifier.test(table)) throw new Error(`invalid migrations table name "${table}"`);
  const migrations = await readMigrations(options.directory ?? migrationsDirectory());

  return db.session(async (session) => {
    await takeLock(session, log);
    // Migrations run once and may be long (index builds): no statement timeout for them. The
    // session's connection is discarded (pg) or reset (PGlite) afterwards.
    await session.exec("SET statement_timeout = 0");
    await session.exec(`CREATE TABLE IF NOT EXISTS ${table} (
      version    text PRIMARY KEY,
      name       text NOT NULL,
      checksum   text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    const { rows } = await session.query<{ version: string; checksum: string }>(
      `SELECT version, checksum FROM ${table} ORDER BY version`,
    );
    const done = new Map(rows.map((row) => [row.version, row.checksum]));
    check(migrations, done, log);

    const latest = rows.at(-1)?.version ?? "";
    const applied: string[] = [];
    for (const migration of migrations) {
      if (done.has(migration.version)) continue;
      if (migration.version < latest) {
        log.warn({ file: migration.file, latest }, "applying a migration older than the latest");
      }
      const started = performance.now();
      try {
        await session.transaction(async (tx) => {
          await tx.exec(migration.sql);
          await tx.query(`INSERT INTO ${table} (version, name, checksum) VALUES ($1, $2, $3)`, [
            migration.version,
            migration.name,
            migration.checksum,
          ]);
        });
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        throw new Error(`migration ${migration.file} failed: ${reason}`, { cause: err });
      }
      log.info(
        { version: migration.version, name: migration.name, ms: elapsed(started) },
        "migration applied",
      );
      applied.push(migration.version);
    }
    // Unlocking is explicit; if it fails, ending the session releases the lock anyway.
    await session.query(`SELECT pg_advisory_unlock(${lockKey})`).catch(() => {});
    return { applied };
  });
}

async function takeLock(session: Session, log: Logger): Promise<void> {
  const { rows } = await session.query<{ locked: boolean }>(
    `SELECT pg_try_advisory_lock(${lockKey}) AS locked`,
  );
  if (rows[0]?.locked) return;
  log.info("waiting for another process to finish migrating the database");
  try {
    // Bounded by the connection's statement timeout.
    await session.query(`SELECT pg_advisory_lock(${lockKey})`);
  } catch (err) {
    throw new Error("could not take the migration lock: another process is still migrating", {
      cause: err,
    });
  }
}

/** Refuses changed files; warns about applied versions this build does not know. */
function check(migrations: Migration[], done: Map<string, string>, log: Logger): void {
  for (const migration of migrations) {
    const checksum = done.get(migration.version);
    if (checksum !== undefined && checksum !== migration.checksum) {
      throw new Error(
        `migration ${migration.file} has changed since it was applied (checksum differs): ` +
          "restore the file and put the change in a new migration",
      );
    }
  }
  const known = new Set(migrations.map((m) => m.version));
  const unknown = [...done.keys()].filter((version) => !known.has(version));
  if (unknown.length > 0) {
    log.warn({ versions: unknown }, "database has migrations this build does not know (newer?)");
  }
}

/** The migration files of a directory, in version order; misnamed or duplicate files throw. */
export async function readMigrations(directory: string): Promise<Migration[]> {
  const files = (await readdir(directory)).filter((file) => file.endsWith(".sql")).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = fileName.exec(file);
    if (!match) throw new Error(`migration file ${file} is not named NNNN_name.sql`);
    const [, version = "", name = ""] = match;
    if (migrations.some((m) => m.version === version)) {
      throw new Error(`migration version ${version} is used by two files (${file})`);
    }
    const sql = await readFile(join(directory, file), "utf8");
    const checksum = createHash("sha256").update(sql.replace(/\r\n/g, "\n")).digest("hex");
    migrations.push({ version, name, file, sql, checksum });
  }
  return migrations;
}

/**
 * src/storage/migrations of this package, from the TypeScript sources (src/storage) as from
 * the compiled output (dist/src/storage), which holds no .sql files: the package root is the
 * nearest directory above this module with a package.json.
 */
export function migrationsDirectory(): string {
  const start = dirname(fileURLToPath(import.meta.url));
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) return join(dir, "src", "storage", "migrations");
    if (dirname(dir) === dir) throw new Error(`no package.json above ${start}`);
  }
}

const elapsed = (started: number) => Math.round(performance.now() - started);
