/**
 * Run by two-processes.test.ts as a separate process: writes AUDIT_EVENTS events through one
 * audit writer into the (migrated) PostgreSQL schema it is given, 64 at a time, and prints
 * the writer's stats as JSON on stdout.
 */
import { createAuditWriter } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { openDatabase } from "../../src/storage/index.js";

const connection = process.env.AUDIT_URL;
const schema = process.env.AUDIT_SCHEMA;
const name = process.env.AUDIT_NAME ?? "child";
const total = Number(process.env.AUDIT_EVENTS ?? "500");
if (!connection || !schema) throw new Error("AUDIT_URL and AUDIT_SCHEMA must be set");

const db = await openDatabase({ connection, schema, log: silentLogger });
try {
  const writer = createAuditWriter({ db, log: silentLogger });
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const n = next++;
      await writer.write({
        actorType: "service",
        actorId: name,
        action: "test_write",
        target: `event:${n}`,
        outcome: "success",
        details: { n },
      });
    }
  };
  await Promise.all(Array.from({ length: 64 }, worker));
  await writer.close();
  process.stdout.write(`${JSON.stringify(writer.stats())}\n`);
} finally {
  await db.close();
}
