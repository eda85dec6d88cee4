import { randomBytes } from "node:crypto";
import { afterAll, beforeAll } from "vitest";
import { type AuditWriter, createAuditWriter } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate, openDatabase } from "../../src/storage/index.js";
import { openPglite } from "../../src/storage/pglite.js";
import { template } from "./pglite-templates.js";

/**
 * Databases the storage suites run on: always PGlite in memory; PostgreSQL too when
 * TEST_DATABASE_URL is set (required on CI). Each `open()` gives a fresh, empty database
 * (not migrated): a new PGlite, or a new schema `tg_test_<random>` dropped on `close()`.
 */
export interface DatabaseTarget {
  name: "pglite" | "postgres";
  open(): Promise<Database>;
}

export const pgliteTarget: DatabaseTarget = { name: "pglite", open: openTestPglite };

let skipNoticeShown = false;

export function databaseTargets(): DatabaseTarget[] {
  const url = process.env.TEST_DATABASE_URL?.trim();
  if (url) return [pgliteTarget, { name: "postgres", open: () => openTestPostgres(url) }];
  if (process.env.CI) {
    throw new Error(
      "TEST_DATABASE_URL is not set: on CI the storage suites must run on PostgreSQL too " +
        "(e.g. TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test)",
    );
  }
  if (!skipNoticeShown) {
    skipNoticeShown = true;
    console.warn(
      "PostgreSQL storage suites skipped: TEST_DATABASE_URL is not set, so only PGlite runs. " +
        "Set it (e.g. postgres://postgres@127.0.0.1:5432/test) to run them on PostgreSQL as well.",
    );
  }
  return [pgliteTarget];
}

/** A fresh database with every migration applied; PGlite unless a target is given. */
export async function openTestDatabase(target: DatabaseTarget = pgliteTarget): Promise<Database> {
  const db = await (target === pgliteTarget ? openMigratedPglite() : target.open());
  try {
    await migrate(db, silentLogger);
    return db;
  } catch (err) {
    await db.close();
    throw err;
  }
}

/**
 * DB_CONNECTION for a `traitgate` process confined to `schema` of the server at `url`: its
 * search_path set in the connection's options, as an operator would point it at a schema.
 */
export function schemaConnection(url: string, schema: string): string {
  const options = encodeURIComponent(`-c search_path=${schema}`);
  return `${url}${url.includes("?") ? "&" : "?"}options=${options}`;
}

/** A schema name no other test run uses. */
export function testSchemaName(): string {
  return `tg_test_${randomBytes(6).toString("hex")}`;
}

/** PostgreSQL confined to a new schema (or the given one), dropped with everything in it on close. */
export async function openTestPostgres(url: string, schema = testSchemaName()): Promise<Database> {
  const db = await openDatabase({
    connection: url,
    schema,
    acquireTimeoutMs: 5_000,
    log: silentLogger,
  });
  let dropped = false;
  return {
    ...db,
    async close() {
      if (!dropped) {
        dropped = true;
        await db.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch((err: unknown) => {
          console.warn(`could not drop test schema ${schema}:`, err);
        });
      }
      await db.close();
    },
  };
}

async function openTestPglite(): Promise<Database> {
  return openPglite({ dataDir: "memory://", template: await template("fresh"), log: silentLogger });
}

async function openMigratedPglite(): Promise<Database> {
  return openPglite({
    dataDir: "memory://",
    template: await template("migrated"),
    log: silentLogger,
  });
}

/**
 * TEST_DATABASE_URL for a suite that needs a real PostgreSQL server; on CI it must be set,
 * elsewhere an unset one skips the suite with a message naming it.
 */
export function postgresUrlFor(suite: string): string | undefined {
  const url = process.env.TEST_DATABASE_URL?.trim() || undefined;
  if (!url && process.env.CI) throw new Error("TEST_DATABASE_URL must be set in CI (see .ci/run)");
  if (!url)
    console.warn(`${suite}: TEST_DATABASE_URL is unset: these PostgreSQL tests are skipped`);
  return url;
}

/**
 * Two handles on one new, migrated schema, as two server processes would have: A drops the
 * schema when it closes (close B first), B is a plain connection to it.
 */
export async function twoHandlesOnOneSchema(url: string): Promise<[Database, Database]> {
  const schema = testSchemaName();
  const a = await openTestPostgres(url, schema);
  await migrate(a, silentLogger);
  const b = await openDatabase({ connection: url, schema, log: silentLogger });
  return [a, b];
}

/**
 * Runs `fn` while `db`'s audit log refuses the events whose action is LIKE `pattern` (an
 * insert trigger that raises); every other event is written as usual.
 */
export async function refusingAuditEvents<T>(
  db: Pick<Database, "exec">,
  pattern: string,
  fn: () => Promise<T>,
): Promise<T> {
  await db.exec(`
    CREATE FUNCTION test_refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.action LIKE '${pattern}' THEN RAISE EXCEPTION 'refused by the test'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER test_refuse_events BEFORE INSERT ON audit_events
      FOR EACH ROW EXECUTE FUNCTION test_refuse_events();`);
  try {
    return await fn();
  } finally {
    await db.exec(`
      DROP TRIGGER test_refuse_events ON audit_events;
      DROP FUNCTION test_refuse_events();`);
  }
}

/**
 * For a describe block: a migrated database of `target` and an audit writer on it, opened
 * before its tests and closed after them (read `db` and `writer` inside the tests).
 */
export function useAuditedDatabase(target: DatabaseTarget): { db: Database; writer: AuditWriter } {
  const opened = {} as { db: Database; writer: AuditWriter };
  beforeAll(async () => {
    opened.db = await openTestDatabase(target);
    opened.writer = createAuditWriter({ db: opened.db, log: silentLogger });
  });
  afterAll(async () => {
    await opened.writer?.close();
    await opened.db?.close();
  });
  return opened;
}
