import { generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { parseAuditVerifyArgs, runAuditVerifyCommand } from "../../src/audit/index.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { startTestServer } from "../support/server.js";

/**
 * Issue 14 item 9: deleting the newest audit rows went unnoticed. The core now signs a
 * checkpoint of the chain's head on shutdown (and at an interval), logs it, and `audit verify`
 * proves against such a checkpoint, kept outside the database, that nothing up to it was cut.
 */

const pem = generateKeyPairSync("ed25519").privateKey.export({
  format: "pem",
  type: "pkcs8",
}) as string;

/** Deletes the newest `n` events, as the table's owner could (append-only triggers off). */
async function deleteNewest(db: Database, n: number): Promise<void> {
  await db.session(async (session) => {
    await session.exec("ALTER TABLE audit_events DISABLE TRIGGER USER");
    try {
      const { rowCount } = await session.query(
        `DELETE FROM audit_events WHERE seq IN
           (SELECT seq FROM audit_events ORDER BY seq DESC LIMIT ${n})`,
      );
      expect(rowCount).toBe(n);
    } finally {
      await session.exec("ALTER TABLE audit_events ENABLE TRIGGER USER");
    }
  });
}

describe.each(databaseTargets())("audit checkpoints on $name", (target) => {
  it("a checkpoint logged at shutdown exposes the deletion of the newest 5 events", async () => {
    const db = await openTestDatabase(target);
    try {
      const server = await startTestServer({ db, env: { AUDIT_CHECKPOINT_KEY: pem } });
      for (const name of ["anna", "bert", "cyra", "dean", "evan", "faye", "gust"]) {
        await server.createUser(name, `${name}-password-long-enough`);
      }
      await server.core.close();

      // The log line a log pipeline keeps: the signed head at shutdown.
      const lines = server.logs.filter((line) => line.includes('"audit checkpoint"'));
      expect(lines).toHaveLength(1);
      const line = lines[0] ?? "";
      expect(line).not.toContain("PRIVATE KEY");
      const logged = JSON.parse(line) as {
        level: string;
        checkpoint: { seq: string; hash: string };
      };
      expect(logged.level).toBe("info");
      const trusted = server.config.auditCheckpoints.keys.trusted;

      const verify = async (args: string[]) => {
        let out = "";
        const code = await runAuditVerifyCommand(
          db,
          { write: (text: string) => (out += text) },
          { ...parseAuditVerifyArgs(args), trustedKeys: trusted },
        );
        return { code, out };
      };

      const intact = await verify(["--expect-checkpoint", line]);
      expect(intact.code).toBe(0);
      expect(intact.out).toContain("0 events after it");
      expect(intact.out).toContain(`expected head seq ${logged.checkpoint.seq}`);

      await deleteNewest(db, 5);
      // The rest is still a valid chain: without the head kept elsewhere, only the warning.
      const alone = await verify([]);
      expect(alone.out).toMatch(/^audit chain intact/);
      expect(alone.code).toBe(0);
      // With it, the cut is found.
      const cut = await verify(["--expect-checkpoint", line]);
      expect(cut.code).toBe(1);
      expect(cut.out).toContain(`TRUNCATED: expected head seq ${logged.checkpoint.seq}`);
      const head = `${logged.checkpoint.seq}:${logged.checkpoint.hash}`;
      expect((await verify(["--expect-head", head])).code).toBe(1);
    } finally {
      await db.close();
    }
  });
});
