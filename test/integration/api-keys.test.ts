import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ApiKeyService, ApiKeyStatus } from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import { hashKey } from "../../src/apikeys/key-format.js";
import { startTestServer, type TestServer } from "../support/server.js";

/** API key management through the real core (src/platform.ts), over REST and gRPC. */

const password = "api-keys-test-password";
const keyPattern = /^tgk_[a-z2-7]{8}_[A-Za-z0-9_-]{43}$/;
let server: TestServer;
let h2: Http2SessionManager;
let rootId = "";
let root = "";
let viewer = "";
let auditor = "";
/** api_keys:read and api_keys:write, made as the command line makes it. */
let adminKey = "";
/** api_keys:read only. */
let readKey = "";
/** Every key this file saw, to check that none reached a log line. */
const seenKeys: string[] = [];

beforeAll(async () => {
  server = await startTestServer();
  rootId = await server.createUser("root", password, ["admin"]);
  await server.createUser("vera", password, ["viewer"]);
  await server.createUser("audrey", password, ["auditor"]);
  root = await login("root");
  viewer = await login("vera");
  auditor = await login("audrey");
  adminKey = await server.createApiKey(["api_keys:read", "api_keys:write"], { name: "bootstrap" });
  readKey = await server.createApiKey(["api_keys:read"], { name: "read only" });
  seenKeys.push(adminKey, readKey);
  h2 = new Http2SessionManager(server.url);
});
afterAll(async () => {
  h2?.abort();
  await server?.close();
});

async function login(username: string): Promise<string> {
  const res = await fetch(`${server.url}/auth/login`, {
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
  field: string | undefined;
}

async function rest(
  method: string,
  path: string,
  auth: { token?: string; key?: string },
  body?: unknown,
): Promise<Reply> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...(auth.token ? { authorization: `Bearer ${auth.token}` } : {}),
      ...(auth.key ? { "x-api-key": auth.key } : {}),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  const info = (
    json.details as { reason?: string; metadata?: { field?: string } }[] | undefined
  )?.[0];
  return { status: res.status, body: json, reason: info?.reason, field: info?.metadata?.field };
}

async function create(
  scopes: string[],
  extra: Record<string, unknown> = {},
  auth = { token: root, key: adminKey },
) {
  const res = await rest("POST", "/api/admin/api-keys", auth, {
    name: "made in test",
    scopes,
    ...extra,
  });
  if (typeof res.body.key === "string") seenKeys.push(res.body.key);
  return res;
}

function grpcClient(headers: Record<string, string>) {
  return createClient(
    ApiKeyService,
    createGrpcTransport({
      baseUrl: server.url,
      sessionManager: h2,
      interceptors: [
        (next) => async (req) => {
          for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
          return next(req);
        },
      ],
    }),
  );
}

function grpcFailure(err: unknown) {
  const e = ConnectError.from(err);
  return { code: e.code, reason: e.findDetails(ErrorInfoSchema)[0]?.reason };
}

describe("API keys over REST", () => {
  it("creates a key shown once, which then works on the API key service itself", async () => {
    const created = await create(["api_keys:read", "api_keys:write"], {
      expires_at: new Date(Date.now() + 7 * 86_400_000).toISOString(),
    });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const key = created.body.key as string;
    expect(key).toMatch(keyPattern);
    const apiKey = created.body.api_key as Record<string, unknown>;
    expect(apiKey).toMatchObject({
      name: "made in test",
      prefix: key.slice(0, 12),
      scopes: ["api_keys:read", "api_keys:write"],
      created_by: rootId,
      status: "API_KEY_STATUS_ACTIVE",
      revoked_by: "",
    });
    const id = apiKey.key_id as string;

    // The new key lists keys; neither the listing nor a read shows any key again.
    const listed = await rest("GET", "/api/admin/api-keys?page_size=200", { token: root, key });
    expect(listed.status).toBe(200);
    const keys = listed.body.api_keys as { key_id: string; prefix: string }[];
    expect(keys.map((k) => k.key_id)).toContain(id);
    const got = await rest("GET", `/api/admin/api-keys/${id}`, { token: root, key });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ key_id: id, prefix: key.slice(0, 12) });
    for (const text of [JSON.stringify(listed.body), JSON.stringify(got.body)]) {
      expect(text).not.toContain(key.slice(13));
      expect(text).not.toContain(hashKey(key));
      expect(text).not.toMatch(/"key"\s*:/);
    }
  });

  it("answers 401 without a key or with a bad one, and 401 without a token", async () => {
    const path = "/api/admin/api-keys";
    expect(await rest("GET", path, { token: root })).toMatchObject({
      status: 401,
      reason: "API_KEY_MISSING",
    });
    expect(await rest("GET", path, { token: root, key: "not-a-key" })).toMatchObject({
      status: 401,
      reason: "API_KEY_INVALID",
    });
    const wrongSecret = `${adminKey.slice(0, 13)}${"A".repeat(43)}`;
    expect(await rest("GET", path, { token: root, key: wrongSecret })).toMatchObject({
      status: 401,
      reason: "API_KEY_INVALID",
    });
    expect((await rest("GET", path, { key: adminKey })).status).toBe(401);
  });

  it("refuses a viewer with 403 ROLE and a key without the scope with 403 API_KEY_SCOPE", async () => {
    expect(
      await rest("GET", "/api/admin/api-keys", { token: viewer, key: adminKey }),
    ).toMatchObject({
      status: 403,
      reason: "ROLE",
    });
    const res = await create(["api_keys:read"], {}, { token: root, key: readKey });
    expect(res).toMatchObject({ status: 403, reason: "API_KEY_SCOPE" });
    // An auditor reads with a read key but cannot create, whatever the key.
    expect(
      (await rest("GET", "/api/admin/api-keys", { token: auditor, key: readKey })).status,
    ).toBe(200);
    expect(await create(["api_keys:read"], {}, { token: auditor, key: adminKey })).toMatchObject({
      status: 403,
      reason: "ROLE",
    });
  });

  it("answers 400 naming the field for unknown scopes, bad expiry and bad names", async () => {
    const unknown = await create(["api_keys:read", "everything:all"]);
    expect(unknown).toMatchObject({ status: 400, reason: "UNKNOWN_SCOPE", field: "scopes" });
    expect(unknown.body.message).toContain("everything:all");
    expect(await create([])).toMatchObject({ status: 400, field: "scopes" });
    const past = await create(["api_keys:read"], { expires_at: "2020-01-01T00:00:00Z" });
    expect(past).toMatchObject({ status: 400, field: "expires_at" });
    const far = await create(["api_keys:read"], {
      expires_at: new Date(Date.now() + 400 * 86_400_000).toISOString(),
    });
    expect(far).toMatchObject({ status: 400, field: "expires_at" });
    const noName = await rest(
      "POST",
      "/api/admin/api-keys",
      { token: root, key: adminKey },
      { name: "", scopes: ["api_keys:read"] },
    );
    expect(noName).toMatchObject({ status: 400, field: "name" });
    expect(
      await rest("GET", "/api/admin/api-keys/not-a-uuid", { token: root, key: adminKey }),
    ).toMatchObject({ status: 400, field: "key_id" });
    expect(
      await rest("GET", "/api/admin/api-keys?status=NOPE", { token: root, key: adminKey }),
    ).toMatchObject({ status: 400 });
  });

  it("refuses a key that asks for scopes the calling key lacks (403 SCOPE_ESCALATION)", async () => {
    const res = await create(["api_keys:write", "settings:write"]);
    expect(res).toMatchObject({ status: 403, reason: "SCOPE_ESCALATION", field: "scopes" });
  });

  it("keeps user and service account scopes from a key that lacks them, and passes on those it holds", async () => {
    const usersReader = await server.createApiKey(["api_keys:write", "users:read"]);
    const as = { token: root, key: usersReader };
    for (const scope of ["users:write", "service_accounts:read", "service_accounts:write"]) {
      const res = await create([scope], {}, as);
      expect(res, scope).toMatchObject({ status: 403, reason: "SCOPE_ESCALATION" });
      expect(res.body.key).toBeUndefined();
    }
    const minted = await create(["users:read"], {}, as);
    expect(minted.status).toBe(200);
    const key = minted.body.key as string;
    expect((await rest("GET", "/api/admin/users", { token: root, key })).status).toBe(200);
    const write = await rest(
      "POST",
      "/api/admin/users",
      { token: root, key },
      { username: "never-made", password: "minted key quartz lantern 88" },
    );
    expect(write).toMatchObject({ status: 403, reason: "API_KEY_SCOPE" });
  });

  it("revokes a key: refused at once (401), listed as revoked, audited", async () => {
    const created = await create(["api_keys:read"]);
    const key = created.body.key as string;
    const id = (created.body.api_key as { key_id: string }).key_id;
    expect((await rest("GET", `/api/admin/api-keys/${id}`, { token: root, key })).status).toBe(200);
    const revoked = await rest(
      "POST",
      `/api/admin/api-keys/${id}:revoke`,
      { token: root, key: adminKey },
      {},
    );
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({
      key_id: id,
      status: "API_KEY_STATUS_REVOKED",
      revoked_by: rootId,
    });
    expect(await rest("GET", `/api/admin/api-keys/${id}`, { token: root, key })).toMatchObject({
      status: 401,
      reason: "API_KEY_INVALID",
    });
    const list = await rest("GET", "/api/admin/api-keys?status=API_KEY_STATUS_REVOKED", {
      token: root,
      key: adminKey,
    });
    expect((list.body.api_keys as { key_id: string }[]).map((k) => k.key_id)).toEqual([id]);
    const unknown = await rest(
      "POST",
      "/api/admin/api-keys/00000000-0000-4000-8000-000000000000:revoke",
      { token: root, key: adminKey },
      {},
    );
    expect(unknown).toMatchObject({ status: 404, reason: "API_KEY_NOT_FOUND" });

    const { rows } = await server.core.db.query<{
      actor_type: string;
      actor_id: string;
      details: Record<string, unknown>;
    }>(
      "SELECT actor_type, actor_id, details FROM audit_events WHERE action = 'api_key_revoke' AND target = $1",
      [`api_key:${id}`],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ actor_type: "user", actor_id: rootId });
    expect(rows[0]?.details).toMatchObject({ scopes: ["api_keys:read"], already_revoked: false });
    expect(typeof rows[0]?.details.api_key_id).toBe("string");
  });

  it("creates and revokes nothing whose audit event cannot be written (503)", async () => {
    const kept = await create(["api_keys:read"]);
    const key = kept.body.key as string;
    const id = (kept.body.api_key as { key_id: string }).key_id;
    await server.core.db.exec("ALTER TABLE audit_events RENAME TO audit_events_away");
    let made: Reply;
    let revoked: Reply;
    try {
      made = await create(["api_keys:read"], { name: "never audited" });
      revoked = await rest(
        "POST",
        `/api/admin/api-keys/${id}:revoke`,
        { token: root, key: adminKey },
        {},
      );
    } finally {
      await server.core.db.exec("ALTER TABLE audit_events_away RENAME TO audit_events");
    }
    expect([made.status, made.reason, made.body.key]).toEqual([
      503,
      "AUDIT_UNAVAILABLE",
      undefined,
    ]);
    expect([revoked.status, revoked.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
    const { rows } = await server.core.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM api_keys WHERE name = 'never audited'",
    );
    expect(rows[0]?.n).toBe(0);
    // The key whose revocation failed still works.
    expect((await rest("GET", `/api/admin/api-keys/${id}`, { token: root, key })).status).toBe(200);
  });

  it("refuses an expired key with 401", async () => {
    const created = await create(["api_keys:read"], {
      expires_at: new Date(Date.now() + 1_500).toISOString(),
    });
    expect(created.status).toBe(200);
    const key = created.body.key as string;
    expect((await rest("GET", "/api/admin/api-keys", { token: root, key })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1_600));
    const res = await rest("GET", "/api/admin/api-keys", { token: root, key });
    expect(res).toMatchObject({ status: 401, reason: "API_KEY_INVALID" });
    expect(res.body.message).toMatch(/expired/);
  });

  it("audits creation with the actor, the key used and the new key's scopes, never the key", async () => {
    const created = await create(["api_keys:read"], {}, { token: root, key: adminKey });
    const id = (created.body.api_key as { key_id: string }).key_id;
    const adminKeyId = (
      await server.core.db.query<{ id: string }>("SELECT id FROM api_keys WHERE prefix = $1", [
        adminKey.slice(4, 12),
      ])
    ).rows[0]?.id;
    const { rows } = await server.core.db.query<{
      actor_id: string;
      outcome: string;
      request_id: string | null;
      details: Record<string, unknown>;
    }>(
      "SELECT actor_id, outcome, request_id, details FROM audit_events WHERE action = 'api_key_create' AND target = $1",
      [`api_key:${id}`],
    );
    expect(rows).toEqual([
      {
        actor_id: rootId,
        outcome: "success",
        request_id: expect.any(String),
        details: {
          name: "made in test",
          prefix: (created.body.key as string).slice(0, 12),
          scopes: ["api_keys:read"],
          expires_at: null,
          api_key_id: adminKeyId,
        },
      },
    ]);
    const { rows: all } = await server.core.db.query<{ t: string }>(
      "SELECT string_agg(details::text, '') AS t FROM audit_events",
    );
    for (const key of seenKeys) {
      expect(all[0]?.t).not.toContain(key.slice(13));
      expect(all[0]?.t).not.toContain(hashKey(key));
    }
  });
});

describe("API keys over gRPC", () => {
  it("creates, lists and revokes with a bearer token and X-API-Key", async () => {
    const client = grpcClient({ authorization: `Bearer ${root}`, "x-api-key": adminKey });
    const created = await client.createApiKey({ name: "grpc", scopes: ["api_keys:read"] });
    expect(created.key).toMatch(keyPattern);
    seenKeys.push(created.key);
    expect(created.apiKey?.status).toBe(ApiKeyStatus.ACTIVE);
    const id = created.apiKey?.keyId ?? "";
    const withNew = grpcClient({ authorization: `Bearer ${root}`, "x-api-key": created.key });
    expect((await withNew.getApiKey({ keyId: id })).apiKey?.name).toBe("grpc");
    const list = await withNew.listApiKeys({ status: ApiKeyStatus.ACTIVE, pageSize: 200 });
    expect(list.apiKeys.map((k) => k.keyId)).toContain(id);
    expect((await client.revokeApiKey({ keyId: id })).apiKey?.status).toBe(ApiKeyStatus.REVOKED);
    expect(grpcFailure(await withNew.getApiKey({ keyId: id }).catch((e: unknown) => e))).toEqual({
      code: Code.Unauthenticated,
      reason: "API_KEY_INVALID",
    });
  });

  it("refuses a viewer (ROLE), a missing scope (API_KEY_SCOPE) and a missing key", async () => {
    const asViewer = grpcClient({ authorization: `Bearer ${viewer}`, "x-api-key": adminKey });
    expect(grpcFailure(await asViewer.listApiKeys({}).catch((e: unknown) => e))).toEqual({
      code: Code.PermissionDenied,
      reason: "ROLE",
    });
    const readOnly = grpcClient({ authorization: `Bearer ${root}`, "x-api-key": readKey });
    expect(
      grpcFailure(
        await readOnly
          .createApiKey({ name: "x", scopes: ["api_keys:read"] })
          .catch((e: unknown) => e),
      ),
    ).toEqual({ code: Code.PermissionDenied, reason: "API_KEY_SCOPE" });
    const noKey = grpcClient({ authorization: `Bearer ${root}` });
    expect(grpcFailure(await noKey.listApiKeys({}).catch((e: unknown) => e))).toEqual({
      code: Code.Unauthenticated,
      reason: "API_KEY_MISSING",
    });
  });
});

describe("API keys and the logs", () => {
  it("never write a key or its secret to a log line", () => {
    expect(seenKeys.length).toBeGreaterThan(5);
    const logs = server.logs.join("\n");
    expect(logs).toContain('"reason":"API_KEY_INVALID"'); // refusals above were logged
    for (const key of seenKeys) expect(logs).not.toContain(key.slice(13));
  });
});
