import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSecretBox, parseDataKeys } from "../../src/crypto/secret-box.js";
import { DomainError } from "../../src/errors.js";
import { silentLogger } from "../../src/log.js";
import { createSettings, type Settings } from "../../src/settings/settings.js";
import { settingsChannel } from "../../src/settings/settings-store.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { databaseTargets } from "../support/database.js";
import { testDataKey } from "../support/server.js";

/** The settings domain and its store on PGlite and on PostgreSQL (TEST_DATABASE_URL). */

const actor = { kind: "user" as const, userId: "u-1", username: "root", apiKeyId: "k-1" };
const meta = { requestId: "req-1" };

describe.each(databaseTargets())("settings store on $name", (target) => {
  let db: Database;
  let settings: Settings;
  const audited: { outcome: string; details?: Readonly<Record<string, unknown>> }[] = [];

  beforeAll(async () => {
    db = await target.open();
    await migrate(db, silentLogger);
    settings = createSettings({
      db,
      box: createSecretBox(parseDataKeys(testDataKey)),
      audit: {
        write: async (event) => {
          audited.push(event);
          return { id: "x", seq: "1", hash: "h" };
        },
        writeIn: async (_tx, event) => {
          audited.push(event);
          return { id: "x", seq: "1", hash: "h" };
        },
      },
      environment: new Map([["log_level", "warn"]]),
      log: silentLogger,
    });
  });
  afterAll(async () => db?.close());

  it("starts at version 0 with the environment's and the registry's values", async () => {
    const view = await settings.get();
    expect(view.version).toBe(0);
    expect(view.lastUpdate).toBeUndefined();
    expect(view.settings).toMatchObject({ log_level: "warn", port: 8080, data_source: "" });
    expect(view.sources).toMatchObject({ log_level: "environment", port: "default" });
  });

  it("lets exactly one of two updates made at the same version through", async () => {
    const { version } = await settings.get();
    const results = await Promise.allSettled([
      settings.update(actor, meta, { values: { port: 9001 }, expectedVersion: version }),
      settings.update(actor, meta, { values: { port: 9002 }, expectedVersion: version }),
    ]);
    const ok = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r) => r.status === "rejected");
    expect(ok).toHaveLength(1);
    expect(refused).toHaveLength(1);
    const reason = (refused[0] as PromiseRejectedResult).reason as DomainError;
    expect(reason).toBeInstanceOf(DomainError);
    expect([reason.kind, reason.reason]).toEqual(["aborted", "VERSION_MISMATCH"]);
    expect((await settings.get()).version).toBe(version + 1);
    expect(audited.at(-1)).toMatchObject({ outcome: expect.any(String) });
  });

  it("seals secrets in their row and opens them in the effective settings", async () => {
    const secret = "postgres://svc:s3cr3t-value@warehouse/x?sslpassword=other";
    const out = await settings.update(actor, meta, { values: { data_source: secret } });
    expect(out.settings.data_source).toBe("postgres://svc:****@warehouse/x?sslpassword=****");
    const { rows } = await db.query<{ value: unknown; sealed: string }>(
      "SELECT value, sealed FROM settings WHERE key = 'data_source'",
    );
    expect(rows[0]?.value).toBeNull();
    expect(rows[0]?.sealed).not.toContain("s3cr3t");
    expect((await settings.load()).values.data_source).toBe(secret);
    // Moved to another key's row, the sealed value does not open (context-bound): the key
    // falls back to its default instead of showing, or failing on, the moved secret.
    await db.query("INSERT INTO settings (key, sealed, version) VALUES ('rag.plugin_id', $1, 0)", [
      rows[0]?.sealed,
    ]);
    const loaded = await settings.load();
    expect([loaded.values["rag.plugin_id"], loaded.sources["rag.plugin_id"]]).toEqual([
      "",
      "default",
    ]);
    await db.query("DELETE FROM settings WHERE key = 'rag.plugin_id'");
  });

  it("keeps a history, newest first, a page at a time, with secrets as ****", async () => {
    await settings.update(actor, { requestId: "req-h" }, { values: { "rag.top_k_default": 9 } });
    await settings.update(actor, meta, { values: { "rag.top_k_default": null } });
    const first = await settings.history({ pageSize: 2 });
    expect(first.updates).toHaveLength(2);
    expect(first.updates[0]?.changes).toEqual([
      { key: "rag.top_k_default", before: 9, after: null },
    ]);
    expect(first.updates[1]).toMatchObject({ requestId: "req-h", username: "root" });
    const rest = await settings.history({ pageToken: first.nextPageToken });
    expect(rest.nextPageToken).toBe("");
    const all = [...first.updates, ...rest.updates];
    expect(all.map((u) => u.version)).toEqual([...all.map((u) => u.version)].sort((x, y) => y - x));
    const onlySecret = await settings.history({ key: "data_source" });
    expect(onlySecret.updates.map((u) => u.changes)).toEqual([
      [{ key: "data_source", before: null, after: "****" }],
    ]);
    await expect(settings.history({ pageToken: "abc" })).rejects.toMatchObject({
      reason: "INVALID_PAGE_TOKEN",
    });
  });

  it("notifies listeners at commit, not for a rolled-back transaction", async () => {
    const payloads: string[] = [];
    const subscription = await db.listen(settingsChannel, {
      onNotification: (p) => payloads.push(p),
    });
    try {
      await db
        .transaction(async (tx) => {
          await tx.query("SELECT pg_notify($1, 'rolled-back')", [settingsChannel]);
          throw new Error("roll back");
        })
        .catch(() => {});
      // A session's reset (DISCARD ALL on PGlite) must not end the LISTEN.
      await db.session(async (s) => s.query("SELECT 1"));
      const { version } = await settings.update(actor, meta, { values: { port: 9100 } });
      const deadline = Date.now() + 2_000;
      while (!payloads.includes(String(version)) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(payloads).toEqual([String(version)]);
    } finally {
      await subscription.close();
    }
  });
});
