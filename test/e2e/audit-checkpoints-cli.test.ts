import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { checkpointKeysFrom, publicKeyBase64 } from "../../src/audit/checkpoint-keys.js";
import { silentLogger } from "../../src/log.js";
import { openDatabase } from "../../src/storage/index.js";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import { seedDataDir } from "../support/pglite-templates.js";

/**
 * Signed checkpoints from the command line: `serve` logs one at shutdown, and `audit verify`,
 * given only the public key, proves with that line that nothing up to it was cut.
 */

const dirs: string[] = [];
afterAll(() => {
  killAll();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe("traitgate audit verify with checkpoints", () => {
  it("verifies with the public key alone, and finds the newest events cut", async () => {
    const dir = seedDataDir(mkdtempSync(join(tmpdir(), "traitgate-checkpoint-cli-")));
    dirs.push(dir);
    const seed = randomBytes(32).toString("base64");
    const signing = checkpointKeysFrom({ AUDIT_CHECKPOINT_KEY: seed }, []).signing;
    if (signing === undefined) throw new Error("no signing key");
    const publicKey = publicKeyBase64(signing.publicKey);
    const common = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATA_DIR: dir,
      PORT: "0",
      HOST: "127.0.0.1",
      JWT_SECRET: "cli-test-secret-0123456789-abcdefghijkl",
      DATA_ENCRYPTION_KEY: Buffer.alloc(32, 3).toString("base64"),
    };
    const core = { ...common, AUDIT_CHECKPOINT_KEY: seed };
    const auditor = { ...common, AUDIT_CHECKPOINT_PUBLIC_KEYS: publicKey };

    const { child, output } = await startCli(["serve"], core, /traitgate listening/);
    // Refused logins are audited: three events for the checkpoint to cover.
    for (const username of ["nurse", "clerk", "porter"]) {
      const res = await fetch(`${listeningUrl(output())}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ username, password: "not-the-password" }),
      });
      expect(res.status).toBe(401);
    }
    expect(await stopCli(child)).toBe(0);
    const line = output()
      .split("\n")
      .find((l) => l.includes('"msg":"audit checkpoint"'));
    expect(line).toBeDefined();
    expect(output()).not.toContain(seed);
    const checkpoint = ["--expect-checkpoint", line ?? ""];

    const intact = await runCli(["audit", "verify", ...checkpoint], auditor);
    expect(intact.stdout).toContain("audit checkpoints: 1 verified");
    expect(intact.stdout).toContain("0 events after it");
    expect(intact.code).toBe(0);

    const db = await openDatabase({ dataDir: join(dir, "pglite"), log: silentLogger });
    try {
      await db.session(async (session) => {
        await session.exec("ALTER TABLE audit_events DISABLE TRIGGER USER");
        await session.exec(
          "DELETE FROM audit_events WHERE seq IN (SELECT seq FROM audit_events ORDER BY seq DESC LIMIT 2)",
        );
        await session.exec("ALTER TABLE audit_events ENABLE TRIGGER USER");
      });
    } finally {
      await db.close();
    }
    const cut = await runCli(["audit", "verify", ...checkpoint], auditor);
    expect(cut.stdout).toContain("audit log TRUNCATED");
    expect(cut.code).toBe(1);

    const usage = await runCli(["audit", "verify", "--expect-head", "12"], auditor);
    expect(usage.stderr).toContain("--expect-head must be SEQ:HASH");
    expect(usage.code).toBe(2);
  }, 300_000);
});
