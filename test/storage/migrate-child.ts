/**
 * Run by migrate.test.ts as a separate process: opens the PostgreSQL schema it is given,
 * migrates it, and prints `{"applied": [...]}` on stdout.
 */
import { silentLogger } from "../../src/log.js";
import { migrate, openDatabase } from "../../src/storage/index.js";

const connection = process.env.MIGRATE_URL;
const schema = process.env.MIGRATE_SCHEMA;
if (!connection || !schema) throw new Error("MIGRATE_URL and MIGRATE_SCHEMA must be set");

const db = await openDatabase({ connection, schema, log: silentLogger });
try {
  const result = await migrate(db, silentLogger);
  process.stdout.write(`${JSON.stringify(result)}\n`);
} finally {
  await db.close();
}
