import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKeyStore } from "../../src/apikeys/api-key-store.js";
import { type ApiKeys, createApiKeys } from "../../src/apikeys/api-keys.js";
import { hashKey } from "../../src/apikeys/key-format.js";
import { type AuditWriter, createAuditWriter } from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import { silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";

/** The API key store and domain on PGlite and on PostgreSQL (TEST_DATABASE_URL). */

const day = 24 * 3600 * 1000;
const admin = { type: "user" as const, id: randomUUID() };
const meta = { requestId: "req-test" };

describe.each(databaseTargets())("API keys on $name", (target) => {
  let db: Database;
  let audit: AuditWriter;
  let now = Date.parse("2031-05-01T10:00:00.000Z");
  const forgotten: string[] = [];
  let apiKeys: ApiKeys;

  beforeAll(async () => {
    db = await openTestDatabase(target);
    audit = createAuditWriter({ db, log: silentLogger });
    apiKeys = createApiKeys({
      db,
      audit,
      clock: { now: () => now },
      forget: (prefix) => forgotten.push(prefix),
    });
  });
  afterAll(async () => {
    await audit?.close();
    await db?.close();
  });

  const failure = async (p: Promise<unknown>) => {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DomainError);
    const e = err as DomainError;
    return { kind: e.kind, reason: e.reason, field: e.field, message: e.message };
  };

  it("returns the key once and stores only its SHA-256, never the key", async () => {
    const { record, key } = await apiKeys.create(admin, meta, {
      name: "console",
      scopes: ["settings:write", "settings:read"],
      expiresAt: new Date(now + 30 * day),
    });
    expect(key).toMatch(/^tgk_[a-z2-7]{8}_[A-Za-z0-9_-]{43}$/);
    expect(key.slice(4, 12)).toBe(record.prefix);
    // Registry order, not request order.
    expect(record).toMatchObject({
      name: "console",
      scopes: ["settings:read", "settings:write"],
      createdBy: admin.id,
      revokedAt: null,
      lastUsedAt: null,
    });
    expect(record.expiresAt?.getTime()).toBe(now + 30 * day);
    const { rows } = await db.query<Record<string, unknown>>(
      "SELECT row_to_json(k)::text AS row, secret_hash FROM api_keys k WHERE id = $1",
      [record.id],
    );
    expect(rows[0]?.secret_hash).toBe(hashKey(key));
    expect(String(rows[0]?.row)).not.toContain(key.slice(13));
    expect(await apiKeys.get(admin, meta, { keyId: record.id })).toEqual(record);
  });

  it("audits create, get, list and revoke without the key or its hash", async () => {
    const { record, key } = await apiKeys.create(
      { ...admin, apiKey: { id: "caller-key", scopes: ["api_keys:write", "audit:read"] } },
      { requestId: "req-audit" },
      { name: "audited", scopes: ["audit:read"] },
    );
    await apiKeys.get(admin, meta, { keyId: record.id });
    await apiKeys.list(admin, meta, {});
    await apiKeys.revoke(admin, meta, { keyId: record.id });
    const { rows } = await db.query<{
      action: string;
      actor_id: string;
      target: string | null;
      outcome: string;
      request_id: string;
      details: string;
    }>(
      `SELECT action, actor_id, target, outcome, request_id, details::text AS details
       FROM audit_events WHERE target = $1 OR action = 'api_key_list' ORDER BY seq`,
      [`api_key:${record.id}`],
    );
    expect(rows.map((r) => r.action)).toEqual([
      "api_key_create",
      "api_key_get",
      "api_key_list",
      "api_key_revoke",
    ]);
    expect(rows[0]).toMatchObject({
      actor_id: admin.id,
      outcome: "success",
      request_id: "req-audit",
    });
    expect(JSON.parse(rows[0]?.details ?? "{}")).toEqual({
      name: "audited",
      prefix: `tgk_${record.prefix}`,
      scopes: ["audit:read"],
      expires_at: null,
      api_key_id: "caller-key",
    });
    expect(JSON.parse(rows[3]?.details ?? "{}")).toMatchObject({ already_revoked: false });
    const all = JSON.stringify(rows);
    expect(all).not.toContain(key.slice(13));
    expect(all).not.toContain(hashKey(key));
  });

  it("refuses unknown scopes, bad names and expiry outside (now, now + 365 days], storing nothing", async () => {
    const { rows: before } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM api_keys",
    );
    expect(
      await failure(
        apiKeys.create(admin, meta, { name: "x", scopes: ["settings:read", "root:all"] }),
      ),
    ).toMatchObject({ kind: "invalid_argument", reason: "UNKNOWN_SCOPE", field: "scopes" });
    expect(
      (await failure(apiKeys.create(admin, meta, { name: "x", scopes: ["root:all"] }))).message,
    ).toContain('"root:all"');
    expect(await failure(apiKeys.create(admin, meta, { name: "x", scopes: [] }))).toMatchObject({
      reason: "INVALID_FIELD",
      field: "scopes",
    });
    expect(
      await failure(apiKeys.create(admin, meta, { name: " ", scopes: ["audit:read"] })),
    ).toMatchObject({ reason: "INVALID_FIELD", field: "name" });
    for (const expiresAt of [new Date(now), new Date(now - 1), new Date(now + 366 * day)]) {
      expect(
        await failure(
          apiKeys.create(admin, meta, { name: "x", scopes: ["audit:read"], expiresAt }),
        ),
      ).toMatchObject({ kind: "invalid_argument", field: "expires_at" });
    }
    const { rows: after } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM api_keys",
    );
    expect(after).toEqual(before);
  });

  it("lets a key create keys only with scopes it holds, and audits the refusal", async () => {
    const caller = { ...admin, apiKey: { id: "narrow-key", scopes: ["api_keys:write"] } };
    expect(
      await failure(
        apiKeys.create(
          caller,
          { requestId: "req-escalate" },
          {
            name: "wider",
            scopes: ["api_keys:write", "settings:write"],
          },
        ),
      ),
    ).toMatchObject({ kind: "permission_denied", reason: "SCOPE_ESCALATION", field: "scopes" });
    const { rows } = await db.query<{ outcome: string; details: Record<string, unknown> }>(
      "SELECT outcome, details FROM audit_events WHERE request_id = 'req-escalate'",
    );
    expect(rows).toEqual([
      {
        outcome: "denied",
        details: {
          name: "wider",
          scopes: ["settings:write", "api_keys:write"],
          reason: "SCOPE_ESCALATION",
          missing_scopes: ["settings:write"],
          api_key_id: "narrow-key",
        },
      },
    ]);
    const ok = await apiKeys.create(caller, meta, { name: "same", scopes: ["api_keys:write"] });
    expect(ok.record.scopes).toEqual(["api_keys:write"]);
  });

  it("lets a key create keys only if they expire no later than itself", async () => {
    const until = new Date(now + 24 * 3600_000);
    const caller = {
      ...admin,
      apiKey: { id: "short-key", scopes: ["api_keys:write"], expiresAt: until },
    };
    const forever = await failure(
      apiKeys.create(
        caller,
        { requestId: "req-forever" },
        { name: "forever", scopes: ["api_keys:write"] },
      ),
    );
    expect(forever).toMatchObject({ reason: "LIFETIME_ESCALATION", field: "expires_at" });
    const later = await failure(
      apiKeys.create(caller, meta, {
        name: "later",
        scopes: ["api_keys:write"],
        expiresAt: new Date(until.getTime() + 60_000),
      }),
    );
    expect(later).toMatchObject({ reason: "LIFETIME_ESCALATION" });
    const ok = await apiKeys.create(caller, meta, {
      name: "sooner",
      scopes: ["api_keys:write"],
      expiresAt: new Date(until.getTime() - 60_000),
    });
    expect(ok.record.name).toBe("sooner");
  });

  it("revokes once: later revocations keep the first time, and the verifier is told", async () => {
    const { record } = await apiKeys.create(admin, meta, {
      name: "to revoke",
      scopes: ["audit:read"],
    });
    const revokedAt = now;
    const first = await apiKeys.revoke(admin, meta, { keyId: record.id });
    expect(first).toMatchObject({ revokedBy: admin.id });
    expect(first.revokedAt?.getTime()).toBe(revokedAt);
    expect(apiKeys.statusOf(first)).toBe("revoked");
    expect(forgotten).toContain(record.prefix);
    now += 5_000;
    const second = await apiKeys.revoke({ type: "system" }, meta, { keyId: record.id });
    expect(second.revokedAt?.getTime()).toBe(revokedAt);
    expect(second.revokedBy).toBe(admin.id);
    expect(await failure(apiKeys.revoke(admin, meta, { keyId: randomUUID() }))).toMatchObject({
      kind: "not_found",
      reason: "API_KEY_NOT_FOUND",
      field: "key_id",
    });
  });

  it("lists newest first, each key exactly once across pages, filtered by status", async () => {
    // A fresh database: the listing sees only these keys.
    const own = await openTestDatabase(target);
    try {
      const ownAudit = createAuditWriter({ db: own, log: silentLogger });
      let t = Date.parse("2031-01-01T00:00:00.000Z");
      const keys = createApiKeys({
        db: own,
        audit: ownAudit,
        clock: { now: () => t },
        forget: () => undefined,
      });
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) {
        // Two keys share each creation time: the id breaks the tie.
        if (i % 2 === 0) t += 1_000;
        const { record } = await keys.create(admin, meta, {
          name: `k${i}`,
          scopes: ["audit:read"],
          ...(i === 2 ? { expiresAt: new Date(t + 10_000) } : {}),
        });
        ids.push(record.id);
      }
      await keys.revoke(admin, meta, { keyId: ids[4] ?? "" });
      t += 60_000; // k2 has expired now

      const seen: string[] = [];
      let pageToken = "";
      let pages = 0;
      do {
        const page = await keys.list(admin, meta, { pageSize: 3, pageToken });
        seen.push(...page.keys.map((k) => k.id));
        pageToken = page.nextPageToken;
        pages++;
      } while (pageToken !== "");
      expect(pages).toBe(3);
      expect(new Set(seen).size).toBe(7);
      const { rows } = await own.query<{ id: string }>(
        "SELECT id FROM api_keys ORDER BY created_at DESC, id DESC",
      );
      expect(seen).toEqual(rows.map((r) => r.id));

      const only = async (status: "active" | "revoked" | "expired") =>
        (await keys.list(admin, meta, { status })).keys.map((k) => k.name).sort();
      expect(await only("revoked")).toEqual(["k4"]);
      expect(await only("expired")).toEqual(["k2"]);
      expect(await only("active")).toEqual(["k0", "k1", "k3", "k5", "k6"]);

      const first = await keys.list(admin, meta, { pageSize: 2 });
      expect(
        await failure(keys.list(admin, meta, { pageToken: first.nextPageToken, status: "active" })),
      ).toMatchObject({ reason: "INVALID_PAGE_TOKEN", field: "page_token" });
      expect(await failure(keys.list(admin, meta, { pageToken: "garbage" }))).toMatchObject({
        reason: "INVALID_PAGE_TOKEN",
      });
      expect(await failure(keys.list(admin, meta, { pageSize: 201 }))).toMatchObject({
        field: "page_size",
      });
      await ownAudit.close();
    } finally {
      await own.close();
    }
  });

  it("reports a taken prefix instead of failing, and records last use at most once a minute", async () => {
    const store = createApiKeyStore(db);
    const row = {
      id: randomUUID(),
      name: "dup",
      prefix: "aaaaaaaa",
      secretHash: "a".repeat(64),
      scopes: ["audit:read"],
      createdBy: null,
      createdAt: new Date(now),
      expiresAt: null,
    };
    expect(await store.insert(row)).toBe(true);
    expect(await store.insert({ ...row, id: randomUUID() })).toBe(false);

    await store.touch(row.id, new Date(now));
    await store.touch(row.id, new Date(now + 30_000));
    expect((await store.get(row.id))?.lastUsedAt?.getTime()).toBe(now);
    await store.touch(row.id, new Date(now + 61_000));
    expect((await store.get(row.id))?.lastUsedAt?.getTime()).toBe(now + 61_000);
  });
});
