import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SettingsService } from "../../gen/traitgate/settings/v1/settings_pb.js";
import { verifyAuditChain } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { migrate, openDatabase } from "../../src/storage/index.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The settings API as wired into the real core (src/platform.ts): a bearer token AND an
 * X-API-Key with the right scope, over REST and Connect, on PGlite. Acceptance of issue 4
 * for settings.
 */

const password = "settings-admin-password";
let server: TestServer;
let adminToken = "";
let rwKey = "";
let readKey = "";

async function login(s: TestServer, username: string) {
  const res = await fetch(`${s.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { token: string }).token;
}

interface Reply {
  status: number;
  body: Record<string, unknown>;
  reason: string | undefined;
  metadata: Record<string, string>;
  headers: Headers;
}

async function call(
  s: TestServer,
  method: "GET" | "POST",
  path: string,
  options: { token?: string; key?: string; body?: string; ifMatch?: string } = {},
): Promise<Reply> {
  const res = await fetch(`${s.url}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...(options.key ? { "x-api-key": options.key } : {}),
      ...(options.ifMatch ? { "if-match": options.ifMatch } : {}),
    },
    ...(options.body === undefined ? {} : { body: options.body }),
  });
  const body = (await res.json()) as Record<string, unknown>;
  const details = body.details as { reason?: string; metadata?: Record<string, string> }[];
  return {
    status: res.status,
    body,
    reason: details?.[0]?.reason,
    metadata: details?.[0]?.metadata ?? {},
    headers: res.headers,
  };
}

const admin = (extra: { body?: string; ifMatch?: string; key?: string } = {}) => ({
  token: adminToken,
  key: rwKey,
  ...extra,
});
const get = (s = server) => call(s, "GET", "/api/admin/settings", admin());
const post = (body: string, extra: { ifMatch?: string; key?: string; token?: string } = {}) =>
  call(server, "POST", "/api/admin/settings", { ...admin(), body, ...extra });

async function auditEvents(s: TestServer, outcome?: string) {
  const { rows } = await s.core.db.query<{
    actor_id: string;
    outcome: string;
    request_id: string;
    details: Record<string, unknown>;
  }>(
    `SELECT actor_id, outcome, request_id, details FROM audit_events
      WHERE action = 'settings_update' AND ($1::text IS NULL OR outcome = $1) ORDER BY seq`,
    [outcome ?? null],
  );
  return rows;
}

beforeAll(async () => {
  server = await startTestServer({ env: { LOG_LEVEL: "info" } });
  await server.createUser("root", password, ["admin"]);
  await server.createUser("audrey", password, ["auditor"]);
  await server.createUser("vera", password, ["viewer"]);
  adminToken = await login(server, "root");
  rwKey = await server.createApiKey(["settings:read", "settings:write"]);
  readKey = await server.createApiKey(["settings:read"]);
});
afterAll(async () => server?.close());

describe("settings through the core", () => {
  it("GET, POST log_level debug, GET: the change shows and debug lines appear without a restart", async () => {
    const before = await get();
    expect(before.status).toBe(200);
    expect(before.body).toMatchObject({
      settings: { log_level: "info", "rag.top_k_default": 5, "auth.mfa_required": false },
      sources: { log_level: "environment", "rag.top_k_default": "default" },
    });
    const version = Number(before.body.version);
    expect(before.headers.get("etag")).toBe(`"${version}"`);

    // A key refused for a wrong secret is logged at debug (src/apikeys/verifier.ts): at info,
    // neither it nor a successful call writes a debug line.
    const wrongSecret = `${rwKey.slice(0, -1)}${rwKey.endsWith("A") ? "B" : "A"}`;
    const wrongKey = () => call(server, "GET", "/api/admin/settings", admin({ key: wrongSecret }));
    const debugLines = (from: number) =>
      server.logs.slice(from).filter((l) => l.includes('"level":"debug"'));
    const quiet = server.logs.length;
    await get();
    expect((await wrongKey()).status).toBe(401);
    expect(debugLines(quiet)).toEqual([]);

    const updated = await post('{"log_level": "debug"}', { ifMatch: String(version) });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({
      settings: { log_level: "debug" },
      version: String(version + 1),
      changed: ["log_level"],
      restart_required: [],
      sources: { log_level: "database" },
    });

    const after = await get();
    expect(after.body).toMatchObject({
      settings: { log_level: "debug" },
      version: String(version + 1),
      updated_by: "root",
      sources: { log_level: "database" },
    });
    expect(typeof after.body.updated_at).toBe("string");
    const loud = server.logs.length;
    await wrongKey();
    expect(debugLines(loud).some((l) => l.includes("API key refused"))).toBe(true);
    expect(server.core.settings.current().values.log_level).toBe("debug");

    // And back: debug lines stop at once.
    expect((await post('{"log_level": "warn"}')).status).toBe(200);
    const mark = server.logs.length;
    await get();
    await wrongKey();
    expect(debugLines(mark)).toEqual([]);
    expect((await post('{"log_level": null}')).body).toMatchObject({
      settings: { log_level: "info" },
      sources: { log_level: "environment" },
    });
  });

  it.each([
    ["malformed JSON", '{"log_level": "debug"', "MALFORMED_JSON", undefined],
    ["an empty object", "{}", "EMPTY_UPDATE", "values"],
    ["an unknown key", '{"colour": "blue"}', "INVALID_SETTING", "colour"],
    ["log_level loud", '{"log_level": "loud"}', "INVALID_SETTING", "log_level"],
    ["port as text", '{"port": "x"}', "INVALID_SETTING", "port"],
    ["port 70000", '{"port": 70000}', "INVALID_SETTING", "port"],
    ["port 80.5", '{"port": 80.5}', "INVALID_SETTING", "port"],
    ["mfa as text", '{"auth.mfa_required": "yes"}', "INVALID_SETTING", "auth.mfa_required"],
    ["a bad data source", '{"data_source": "mysql://x"}', "INVALID_SETTING", "data_source"],
  ])("refuses %s with 400 naming the key, and changes nothing", async (_, body, reason, field) => {
    const before = await get();
    const refusedBefore = (await auditEvents(server, "failure")).length;
    const res = await post(body);
    expect(res.status).toBe(400);
    expect(res.body.code).toBe("invalid_argument");
    expect(res.reason).toBe(reason);
    if (field !== undefined) expect(res.metadata.field).toBe(field);
    if (reason === "INVALID_SETTING") {
      expect(res.metadata.keys).toBe(field);
      expect(res.body.message).toContain(field);
    }
    const after = await get();
    expect(after.body.version).toBe(before.body.version);
    expect(after.body.settings).toEqual(before.body.settings);
    // Refusals the settings area sees are audited (malformed JSON never reaches it).
    if (reason !== "MALFORMED_JSON") {
      expect((await auditEvents(server, "failure")).length).toBe(refusedBefore + 1);
    }
  });

  it("names every bad key of one request and applies none of its good ones", async () => {
    const before = await get();
    const res = await post(
      '{"log_level": "debug", "port": 70000, "nope": true, "rag.backend": "elsewhere"}',
    );
    expect(res.status).toBe(400);
    expect(res.metadata.keys?.split(",").sort()).toEqual(["nope", "port", "rag.backend"]);
    expect(res.metadata.problems?.split(",").sort()).toEqual([
      "NOT_ALLOWED",
      "OUT_OF_RANGE",
      "UNKNOWN_SETTING",
    ]);
    const after = await get();
    expect(after.body.settings).toEqual(before.body.settings);
    expect(after.body.version).toBe(before.body.version);
  });

  it("applies an update to several keys all at once, and only when If-Match is current", async () => {
    const { version } = (await get()).body as { version: string };
    const stale = await post('{"rag.backend": "plugin", "rag.plugin_id": "rag-db"}', {
      ifMatch: String(Number(version) - 1),
    });
    expect(stale.status).toBe(409);
    expect(stale.reason).toBe("VERSION_MISMATCH");
    expect(stale.metadata.current_version).toBe(version);
    expect((await get()).body).toMatchObject({ version, settings: { "rag.backend": "builtin" } });

    const ok = await post('{"rag.backend": "plugin", "rag.plugin_id": "rag-db", "port": 9090}', {
      ifMatch: `"${version}"`,
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({
      version: String(Number(version) + 1),
      changed: ["port", "rag.backend", "rag.plugin_id"],
      restart_required: ["port"],
    });
    // The same values again: nothing changes, the version stays.
    const again = await post('{"rag.backend": "plugin"}');
    expect(again.body).toMatchObject({ version: ok.body.version, changed: [] });
    const refusals = (await auditEvents(server, "failure")).length;
    const badHeader = await post('{"port": 9091}', { ifMatch: "soon" });
    expect([badHeader.status, badHeader.metadata.field]).toEqual([400, "If-Match"]);
    expect((await auditEvents(server, "failure")).length).toBe(refusals + 1);
  });

  it("applies no update whose audit event cannot be written (503, nothing changed)", async () => {
    const before = (await get()).body as { version: string; settings: Record<string, unknown> };
    await server.core.db.exec("ALTER TABLE audit_events RENAME TO audit_events_away");
    let res: Awaited<ReturnType<typeof post>>;
    try {
      res = await post('{"log_level": "error"}');
    } finally {
      await server.core.db.exec("ALTER TABLE audit_events_away RENAME TO audit_events");
    }
    expect([res.status, res.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
    const after = (await get()).body as { version: string; settings: Record<string, unknown> };
    expect(after.version).toBe(before.version);
    expect(after.settings.log_level).toBe(before.settings.log_level);
  });

  it("keeps data_source sealed in its row, masked in every answer and the history", async () => {
    const secret = "postgres://app:hunter2-very-secret@db.internal/x";
    const res = await post(JSON.stringify({ data_source: secret }));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      settings: { data_source: "postgres://app:****@db.internal/x" },
      changed: ["data_source"],
      restart_required: ["data_source"],
    });
    const { rows } = await server.core.db.query<Record<string, unknown>>(
      "SELECT * FROM settings WHERE key = 'data_source'",
    );
    expect(JSON.stringify(rows)).not.toContain("hunter2");
    expect(rows[0]?.sealed).toMatch(/^tg1\./);
    expect(server.core.settings.current().values.data_source).toBe(secret);

    // The masked value posted back leaves the secret as it was.
    const { version } = (await get()).body as { version: string };
    const echo = await post(JSON.stringify({ data_source: "postgres://app:****@db.internal/x" }));
    expect(echo.body).toMatchObject({ version, changed: [] });
    expect(server.core.settings.current().values.data_source).toBe(secret);
    // A masked value edited elsewhere is refused: the secret must be sent whole.
    const edited = await post(JSON.stringify({ data_source: "postgres://app:****@other/x" }));
    expect(edited.status).toBe(400);
    expect(edited.metadata).toMatchObject({ field: "data_source", problems: "MASKED_VALUE" });

    const history = await call(server, "GET", "/api/admin/settings/history?key=data_source", {
      token: adminToken,
      key: readKey,
    });
    expect(history.status).toBe(200);
    const updates = history.body.updates as { changes: unknown[] }[];
    expect(updates[0]?.changes).toEqual([{ key: "data_source", before: null, after: "****" }]);
    const everything = JSON.stringify([
      history.body,
      (await get()).body,
      await auditEvents(server),
      server.logs,
    ]);
    expect(everything).not.toContain("hunter2");
  });

  it("audits every successful and refused write with actor, key id and request id; the chain verifies", async () => {
    const rootId = ((await get()).body.updated_by_user_id as string) || "";
    const ok = await call(server, "POST", "/api/admin/settings", {
      ...admin({ body: '{"rag.top_k_default": 7}' }),
    });
    const refused = await post('{"rag.top_k_default": 0}');
    const stale = await post('{"rag.top_k_default": 8}', { ifMatch: "0" });
    const events = await auditEvents(server);
    const byRequest = (reply: Reply) =>
      events.find((e) => e.request_id === reply.headers.get("x-request-id"));
    expect(byRequest(ok)).toMatchObject({
      outcome: "success",
      actor_id: rootId,
      details: {
        changed: ["rag.top_k_default"],
        changes: [{ key: "rag.top_k_default", before: null, after: 7 }],
      },
    });
    expect(byRequest(ok)?.details.api_key_id).toEqual(expect.any(String));
    expect(byRequest(refused)).toMatchObject({
      outcome: "failure",
      details: { reason: "INVALID_SETTING", keys: ["rag.top_k_default"] },
    });
    expect(byRequest(stale)).toMatchObject({
      outcome: "failure",
      details: { reason: "VERSION_MISMATCH", expected_version: 0 },
    });
    const secretEvent = events.find((e) =>
      JSON.stringify(e.details.changes ?? []).includes("data_source"),
    );
    expect(secretEvent?.details.changes).toEqual([
      { key: "data_source", before: null, after: "****" },
    ]);
    expect(await verifyAuditChain(server.core.db)).toMatchObject({ ok: true });
  });

  it("needs a token and a key with the right scope and role", async () => {
    const path = "/api/admin/settings";
    const body = '{"log_level": "warn"}';
    expect((await call(server, "GET", path, { key: rwKey })).status).toBe(401);
    const noKey = await call(server, "GET", path, { token: adminToken });
    expect([noKey.status, noKey.reason]).toEqual([401, "API_KEY_MISSING"]);
    const badKey = await call(server, "GET", path, { token: adminToken, key: "tgk_nope" });
    expect(badKey.status).toBe(401);
    const readOnly = await call(server, "POST", path, { token: adminToken, key: readKey, body });
    expect([readOnly.status, readOnly.reason]).toEqual([403, "API_KEY_SCOPE"]);
    const viewer = await login(server, "vera");
    const asViewer = await call(server, "POST", path, { token: viewer, key: rwKey, body });
    expect([asViewer.status, asViewer.reason]).toEqual([403, "ROLE"]);
    expect((await call(server, "GET", path, { token: viewer, key: rwKey })).status).toBe(403);
    const auditor = await login(server, "audrey");
    expect((await call(server, "GET", path, { token: auditor, key: readKey })).status).toBe(200);
    const history = await call(server, "GET", `${path}/history`, { token: auditor, key: readKey });
    expect(history.status).toBe(200);
    const writing = await call(server, "POST", path, { token: auditor, key: rwKey, body });
    expect([writing.status, writing.reason]).toEqual([403, "ROLE"]);
    expect(server.core.settings.current().values.log_level).not.toBe("warn");
  });

  it("auth.mfa_required and auth.token_ttl_seconds apply to the next login without a restart", async () => {
    await server.createUser("nora", password, ["viewer"]);
    const before = await fetch(`${server.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "nora", password }),
    }).then((r) => r.json() as Promise<{ expires_in: number; refresh_token: string }>);
    expect(before.refresh_token).not.toBe("");
    const changed = await post(
      JSON.stringify({ "auth.mfa_required": true, "auth.token_ttl_seconds": 300 }),
    );
    expect(changed.status).toBe(200);
    try {
      const res = await fetch(`${server.url}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ username: "nora", password }),
      });
      const after = (await res.json()) as {
        token: string;
        expires_in: number;
        refresh_token: string;
      };
      expect([after.expires_in, after.refresh_token]).toEqual([300, ""]);
      const validate = await fetch(`${server.url}/auth/validate`, {
        headers: { authorization: `Bearer ${after.token}` },
      });
      expect(await validate.json()).toMatchObject({
        valid: false,
        reason: "mfa_enrollment_required",
      });
    } finally {
      await post(JSON.stringify({ "auth.mfa_required": null, "auth.token_ttl_seconds": null }));
    }
  });

  it("serves Connect clients: expected_version, definitions and history pages", async () => {
    const client = createClient(
      SettingsService,
      createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }),
    );
    const headers = { authorization: `Bearer ${adminToken}`, "x-api-key": rwKey };
    const { version } = await client.getSettings({}, { headers });
    const err = await client
      .updateSettings({ values: { port: 8081 }, expectedVersion: version - 1n }, { headers })
      .catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Aborted);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("VERSION_MISMATCH");
    const ok = await client.updateSettings(
      { values: { port: 8081 }, expectedVersion: version },
      { headers },
    );
    expect(ok.version).toBe(version + 1n);
    expect(ok.restartRequired).toEqual(["port"]);

    const { definitions } = await client.listSettingDefinitions({}, { headers });
    expect(definitions.map((d) => d.key)).toEqual([
      "port",
      "log_level",
      "data_source",
      "rag.backend",
      "rag.plugin_id",
      "rag.top_k_default",
      "auth.mfa_required",
      "auth.token_ttl_seconds",
      "http.cors_allowed_origins",
    ]);
    expect(definitions.find((d) => d.key === "data_source")).toMatchObject({
      secret: true,
      restartRequired: true,
    });

    const first = await client.getSettingsHistory({ pageSize: 2 }, { headers });
    expect(first.updates.map((u) => u.version)).toEqual([version + 1n, version]);
    const second = await client.getSettingsHistory(
      { pageSize: 2, pageToken: first.nextPageToken },
      { headers },
    );
    expect(second.updates[0]?.version).toBe(version - 1n);
  });
});

describe("settings across a restart", () => {
  it("keeps data_source sealed on disk and opens it after a restart", async () => {
    const dir = await mkdtemp(join(tmpdir(), "tg-settings-"));
    const open = async (env: NodeJS.ProcessEnv = {}) => {
      const db = await openDatabase({ dataDir: dir, log: silentLogger });
      await migrate(db, silentLogger);
      return startTestServer({ db, env });
    };
    const secret = "postgres://app:restart-secret@db/x";
    try {
      const first = await open();
      await first.createUser("root", password, ["admin"]);
      const key = await first.createApiKey(["settings:read", "settings:write"]);
      const token = await login(first, "root");
      const res = await call(first, "POST", "/api/admin/settings", {
        token,
        key,
        body: JSON.stringify({ data_source: secret, "auth.token_ttl_seconds": 600 }),
      });
      expect(res.status).toBe(200);
      await first.close();

      const second = await open();
      try {
        expect(second.core.settings.current().values).toMatchObject({
          data_source: secret,
          "auth.token_ttl_seconds": 600,
        });
        const again = await call(second, "GET", "/api/admin/settings", {
          token: await login(second, "root"),
          key,
        });
        expect(again.body).toMatchObject({
          settings: { data_source: "postgres://app:****@db/x", "auth.token_ttl_seconds": 600 },
          sources: { data_source: "database" },
        });
      } finally {
        await second.close();
      }

      // With the data key lost (a new key, no previous one), the platform still starts: the
      // secret falls back to its default, loudly, and an admin can set it again.
      const third = await open({ DATA_ENCRYPTION_KEY: Buffer.alloc(32, 9).toString("base64") });
      try {
        expect(third.core.settings.current().sources.data_source).toBe("default");
        expect(third.logs.join("\n")).toContain("cannot be opened");
        const reset = await call(third, "POST", "/api/admin/settings", {
          token: await login(third, "root"),
          key,
          body: JSON.stringify({ data_source: "postgres://app:new-secret@db/x" }),
        });
        expect(reset.status).toBe(200);
        expect(third.core.settings.current().values.data_source).toBe(
          "postgres://app:new-secret@db/x",
        );
      } finally {
        await third.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
