import { randomUUID } from "node:crypto";
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { prepareEvent } from "../../src/audit/canonical.js";
import { toRecord } from "../../src/audit/event.js";
import { createAuditWriter, verifyAuditChain } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { migrationsDirectory } from "../../src/storage/migrate.js";
import { databaseTargets } from "../support/database.js";
import { sampleEvent } from "./events.js";

/**
 * The request's origin is covered by the hash chain (docs/audit.md, "Canonical encoding"):
 * a log written before origins were recorded still verifies after the migration that adds
 * them, beside events that have one, and neither adding, changing nor removing an origin goes
 * unnoticed. On PGlite and on PostgreSQL (TEST_DATABASE_URL).
 */

const origin = { clientAddress: "203.0.113.7", userAgent: "origin-chain-test/1.0" };

describe.each(databaseTargets())("the origin in the hash chain, on $name", (target) => {
  let db: Database;
  let before: string;

  /** An event as the previous release appended it: ten-argument audit_append, version 1. */
  async function appendAsBefore(n: number): Promise<void> {
    const { record, detailsJson, canonical } = prepareEvent(
      toRecord(sampleEvent(n), randomUUID(), Date.now()),
    );
    expect(canonical).toContain('"v":1}');
    await db.query(
      `SELECT * FROM audit_append($1::uuid[], $2::timestamptz[], $3::text[], $4::text[],
         $5::text[], $6::text[], $7::text[], $8::text[], $9::jsonb[], $10::text[])`,
      [
        [record.id],
        [record.occurredAt],
        [record.actorType],
        [record.actorId],
        [record.action],
        [record.target],
        [record.outcome],
        [record.requestId],
        [detailsJson],
        [canonical],
      ],
    );
  }

  beforeEach(async () => {
    // The migrations of the previous release: everything before 0015.
    before = mkdtempSync(join(tmpdir(), "traitgate-migrations-"));
    for (const file of readdirSync(migrationsDirectory())) {
      if (file.endsWith(".sql") && file < "0015") {
        copyFileSync(join(migrationsDirectory(), file), join(before, file));
      }
    }
    db = await target.open();
    await migrate(db, silentLogger, { directory: before });
  });
  afterEach(async () => {
    await db?.close();
    rmSync(before, { recursive: true, force: true });
  });

  async function tamper(sql: string, params: unknown[]): Promise<void> {
    await db.session(async (session) => {
      await session.exec("ALTER TABLE audit_events DISABLE TRIGGER USER");
      try {
        const { rowCount } = await session.query(sql, params);
        expect(rowCount).toBe(1);
      } finally {
        await session.exec("ALTER TABLE audit_events ENABLE TRIGGER USER");
      }
    });
  }

  /** Old events, the migration, new events with and without an origin, an old writer again. */
  async function mixedChain(): Promise<{ oldId: string; newId: string }> {
    for (let i = 0; i < 3; i++) await appendAsBefore(i);
    await migrate(db, silentLogger);
    const writer = createAuditWriter({ db, log: silentLogger });
    const withOrigin = await writer.write(sampleEvent(3, { origin }));
    await writer.write(sampleEvent(4));
    await writer.close();
    // A process of the previous release still running beside this one.
    await appendAsBefore(5);
    const { rows } = await db.query<{ id: string }>(
      "SELECT id::text AS id FROM audit_events ORDER BY audit_events.seq LIMIT 1",
    );
    return { oldId: rows[0]?.id ?? "", newId: withOrigin.id };
  }

  it("verifies events written before and after origins were recorded", async () => {
    await mixedChain();
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true, count: 6 });
    const { rows } = await db.query<{ client_address: string | null; user_agent: string | null }>(
      "SELECT client_address, user_agent FROM audit_events ORDER BY audit_events.seq",
    );
    expect(rows.map((r) => r.client_address)).toEqual([
      null,
      null,
      null,
      origin.clientAddress,
      null,
      null,
    ]);
    expect(rows[3]?.user_agent).toBe(origin.userAgent);
  });

  it.each([
    ["an origin added to an old event", "old", "client_address = '198.51.100.1'"],
    ["an origin changed", "new", "client_address = '198.51.100.1'"],
    ["a User-Agent changed", "new", "user_agent = 'someone else'"],
    ["an origin removed", "new", "client_address = NULL, user_agent = NULL"],
  ] as const)("finds %s", async (_name, which, set) => {
    const { oldId, newId } = await mixedChain();
    const id = which === "old" ? oldId : newId;
    await tamper(`UPDATE audit_events SET ${set} WHERE id = $1`, [id]);
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      firstBroken: { id, reason: "hash_mismatch" },
    });
  });
});
