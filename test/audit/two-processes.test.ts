import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  type AuditWriterStats,
  auditChainLockKey,
  runAuditVerifyCommand,
  verifyAuditChain,
} from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { migrate } from "../../src/storage/index.js";
import { openTestPostgres, testSchemaName } from "../support/database.js";
import { raceForAdvisoryLock } from "../support/lock-race.js";

const url = process.env.TEST_DATABASE_URL?.trim();
const child = fileURLToPath(new URL("./write-child.ts", import.meta.url));

function runChild(
  connection: string,
  schema: string,
  name: string,
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", child], {
      env: {
        ...process.env,
        AUDIT_URL: connection,
        AUDIT_SCHEMA: schema,
        AUDIT_NAME: name,
        AUDIT_EVENTS: "500",
      },
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

describe.skipIf(!url)("audit writers in two processes on one PostgreSQL schema", () => {
  it("append 1,000 concurrent events to one chain that `audit verify` accepts", async () => {
    const base = url ?? "";
    const schema = testSchemaName();
    const appName = `tg_audit_${schema}`;
    const connection = `${base}${base.includes("?") ? "&" : "?"}application_name=${appName}`;
    const db = await openTestPostgres(base, schema);
    try {
      await migrate(db, silentLogger);
      // Hold the chain's lock until both children wait for it, so that they really compete.
      const results = await raceForAdvisoryLock(db, auditChainLockKey, appName, () => [
        runChild(connection, schema, "first"),
        runChild(connection, schema, "second"),
      ]);

      for (const result of results) expect(result, result.err).toMatchObject({ code: 0 });
      for (const result of results) {
        const stats = JSON.parse(result.out) as AuditWriterStats;
        expect(stats).toMatchObject({ events: 500, failedTransactions: 0 });
        expect(stats.transactions).toBeLessThan(100);
      }

      const { rows } = await db.query<{ actor_id: string }>(
        "SELECT actor_id FROM audit_events ORDER BY seq",
      );
      expect(rows).toHaveLength(1000);
      // The two processes' batches alternate along the chain.
      const switches = rows.filter((row, i) => i > 0 && row.actor_id !== rows[i - 1]?.actor_id);
      expect(switches.length).toBeGreaterThan(2);

      expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 1000 });
      let out = "";
      const code = await runAuditVerifyCommand(db, { write: (text: string) => (out += text) });
      expect(code, out).toBe(0);
      expect(out).toMatch(/^audit chain intact: 1000 events/m);
    } finally {
      await db.close();
    }
  });
});
