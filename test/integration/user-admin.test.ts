import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { UserAdminService } from "../../gen/traitgate/identity/v1/user_admin_pb.js";
import { createApiKeysModule } from "../../src/apikeys/module.js";
import { type AuditWriter, createAuditWriter, verifyAuditChain } from "../../src/audit/index.js";
import { loadConfig } from "../../src/config.js";
import { createIdentityModule, type IdentityArea } from "../../src/identity/module.js";
import { createPasswordHasher } from "../../src/identity/passwords.js";
import { createUserAdminModule } from "../../src/identity/user-admin-service.js";
import { createLogger } from "../../src/log.js";
import { createApp } from "../../src/server/app.js";
import { listen, type RunningServer } from "../../src/server/listener.js";
import type { Database } from "../../src/storage/index.js";
import { openTestDatabase } from "../support/database.js";
import { testDataKey, testSecret } from "../support/server.js";

/**
 * User administration against a real server on port 0, over REST and gRPC. The server is
 * composed here (identity, API key and user administration modules) the way src/platform.ts
 * composes the core. Every call takes an admin's token and an API key with a users scope.
 */

const rootPassword = "root-password-quartz-lantern";
const viewerPassword = "viewer-password-copper-kettle";
const userPassword = "user-password-walnut-drizzle";
const passwords = [rootPassword, viewerPassword, userPassword];

let server: RunningServer;
let db: Database;
let audit: AuditWriter;
let identity: IdentityArea;
let h2: Http2SessionManager;
let grpc: Client<typeof UserAdminService>;
const logs: string[] = [];
/** User ids the module asked the identity area to forget. */
const forgotten: string[] = [];
/** The identity area's clock runs this far ahead of the wall clock. */
let clockOffsetMs = 0;
let rootId = "";
let rootToken = "";
let viewerToken = "";
/** users:read and users:write, made as the command line makes keys. */
let rootKey = "";

beforeAll(async () => {
  const { config } = loadConfig({
    JWT_SECRET: testSecret,
    DATA_ENCRYPTION_KEY: testDataKey,
    PORT: "0",
    HOST: "127.0.0.1",
  });
  const log = createLogger({
    level: "debug",
    destination: { write: (line: string) => void logs.push(line) },
  });
  db = await openTestDatabase();
  audit = createAuditWriter({ db, log });
  const created = await createIdentityModule({
    db,
    audit,
    jwt: config.jwt,
    log,
    dataKeys: config.dataKeys,
    mfaRequired: false,
    clock: { now: () => Date.now() + clockOffsetMs },
  });
  identity = created.identity;
  const userAdminModule = createUserAdminModule({
    db,
    audit,
    passwords: await createPasswordHasher(),
    forget: (id, sessionIds) => {
      forgotten.push(id);
      created.identity.forgetSessions(sessionIds);
    },
    revokeSessions: (tx, id, reason) => created.identity.revokeUserSessions(tx, id, reason),
    resetMfa: (tx, id) => created.identity.mfa.reset(tx, id),
  });
  const apiKeys = createApiKeysModule({ db, audit, log });
  rootKey = (
    await apiKeys.apiKeys.create(
      { type: "system" },
      { requestId: null },
      { name: "user admin test", scopes: ["users:read", "users:write"] },
    )
  ).key;
  const { listener } = createApp({
    modules: [created.module, userAdminModule, apiKeys.module],
    authenticator: identity,
    apiKeys: apiKeys.verifier,
    health: { check: async () => "SERVING" },
    log,
    maxBodyBytes: config.maxBodyBytes,
  });
  server = await listen(listener, { port: 0, host: "127.0.0.1" });
  h2 = new Http2SessionManager(server.url);
  grpc = createClient(
    UserAdminService,
    createGrpcTransport({ baseUrl: server.url, sessionManager: h2 }),
  );

  rootId = (
    await identity.createUser({
      username: "root",
      email: "",
      password: rootPassword,
      roles: ["admin"],
    })
  ).id;
  await identity.createUser({
    username: "vic",
    email: "",
    password: viewerPassword,
    roles: ["viewer"],
  });
  rootToken = await login("root", rootPassword);
  viewerToken = await login("vic", viewerPassword);
});

afterAll(async () => {
  h2?.abort();
  await server?.close();
  await audit?.close();
  await db?.close();
});

/**
 * The identity area re-reads a user's state at most once a second. In src/platform.ts the
 * module's `forget` drops this process's copy at once; here `forget` only records the ids,
 * so the identity clock is moved past the cache's lifetime, as another process would see it.
 */
function afterCacheLifetime(): void {
  clockOffsetMs += 1_001;
}

interface RestReply {
  status: number;
  body: Record<string, unknown>;
  reason: string | undefined;
  field: string | undefined;
}

async function rest(
  method: string,
  path: string,
  options: { body?: unknown; token?: string | undefined; key?: string } = {},
): Promise<RestReply> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      ...(options.body === undefined ? {} : { "content-type": "application/json" }),
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...(options.key ? { "x-api-key": options.key } : {}),
    },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  const body = (await res.json()) as Record<string, unknown>;
  const info = (
    body.details as { reason?: string; metadata?: { field?: string } }[] | undefined
  )?.[0];
  return { status: res.status, body, reason: info?.reason, field: info?.metadata?.field };
}

const admin = (method: string, path: string, body?: unknown) =>
  rest(method, `/api/admin/users${path}`, { body, token: rootToken, key: rootKey });

async function login(username: string, password: string): Promise<string> {
  const res = await rest("POST", "/auth/login", { body: { username, password } });
  if (res.status !== 200) throw new Error(`login of ${username} failed: ${res.status}`);
  return res.body.token as string;
}

async function validate(token: string) {
  return (await rest("GET", "/auth/validate", { token })).body as {
    valid: boolean;
    reason: string;
    roles: string[];
  };
}

async function createUser(username: string, roles: string[] = ["viewer"]): Promise<string> {
  const res = await admin("POST", "", { username, password: userPassword, roles });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.user_id as string;
}

/** A bearer token and, by default, the admin's API key. */
const bearer = (token: string, key: string | null = rootKey) => ({
  headers: { authorization: `Bearer ${token}`, ...(key ? { "x-api-key": key } : {}) },
});

function grpcFailure(err: unknown): { code: Code; reason: string | undefined } {
  const e = ConnectError.from(err);
  return { code: e.code, reason: e.findDetails(ErrorInfoSchema)[0]?.reason };
}

describe("user administration over REST", () => {
  it("creates a user and gets it back, never with a password or its hash", async () => {
    const res = await admin("POST", "", {
      username: "Alice",
      email: "alice@example.test",
      password: userPassword,
      roles: ["clinician"],
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      username: "Alice",
      email: "alice@example.test",
      roles: ["clinician"],
      is_active: true,
      mfa_enabled: false,
    });
    expect(res.body.user_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(typeof res.body.created_at).toBe("string");
    expect(typeof res.body.updated_at).toBe("string");
    expect(JSON.stringify(res.body)).not.toMatch(/password|argon2/i);

    const got = await admin("GET", `/${res.body.user_id}`);
    expect(got.status).toBe(200);
    expect(got.body).toEqual(res.body);
    expect(await login("alice", userPassword)).toBeTruthy();
  });

  it("refuses a username taken in another letter case", async () => {
    const res = await admin("POST", "", { username: "ALICE", password: userPassword });
    expect(res.status).toBe(409);
    expect(res.reason).toBe("USERNAME_TAKEN");
  });

  it("lists in pages with filters, without duplicates", async () => {
    const names = ["pg-Ada", "pg-bea", "pg-Cy", "pg-dee", "pg-Eve", "pg-fay", "pg-Gus"];
    const ids = new Map<string, string>();
    for (const name of names) ids.set(name, await createUser(name, ["pager"]));

    const seen: string[] = [];
    let token = "";
    let pages = 0;
    do {
      const query = `?page_size=3&role=pager${token ? `&page_token=${token}` : ""}`;
      const res = await admin("GET", query);
      expect(res.status).toBe(200);
      const users = res.body.users as { username: string }[];
      expect(users.length).toBe(pages < 2 ? 3 : 1);
      seen.push(...users.map((u) => u.username));
      token = res.body.next_page_token as string;
      pages++;
    } while (token !== "" && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual(names);

    const prefix = await admin("GET", "?q=PG-&page_size=200");
    expect((prefix.body.users as unknown[]).length).toBe(7);
    const deactivated = ids.get("pg-dee") ?? "";
    expect((await admin("PATCH", `/${deactivated}`, { is_active: false })).status).toBe(200);
    const inactive = await admin("GET", "?active=false&role=pager");
    expect((inactive.body.users as { user_id: string }[]).map((u) => u.user_id)).toEqual([
      deactivated,
    ]);
    const active = await admin("GET", "?active=true&q=pg-");
    expect((active.body.users as unknown[]).length).toBe(6);
    const admins = await admin("GET", "?role=admin");
    expect((admins.body.users as { username: string }[]).map((u) => u.username)).toEqual(["root"]);

    const first = await admin("GET", "?page_size=3&role=pager");
    const otherFilter = await admin(
      "GET",
      `?page_size=3&role=viewer&page_token=${first.body.next_page_token}`,
    );
    expect(otherFilter.status).toBe(400);
    expect(otherFilter.reason).toBe("INVALID_PAGE_TOKEN");
  });

  it("changes roles, which the user's next validate shows", async () => {
    const id = await createUser("rolf", ["viewer"]);
    const token = await login("rolf", userPassword);
    expect((await validate(token)).roles).toEqual(["viewer"]);
    const res = await admin("PATCH", `/${id}`, { roles: { values: ["clinician", "auditor"] } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ roles: ["clinician", "auditor"], is_active: true });
    expect(forgotten).toContain(id);
    afterCacheLifetime();
    expect(await validate(token)).toMatchObject({ valid: true, roles: ["clinician", "auditor"] });
  });

  it("deactivates: the user's unexpired token is invalid at the next validate", async () => {
    const id = await createUser("dora");
    const token = await login("dora", userPassword);
    expect((await validate(token)).valid).toBe(true);
    const res = await admin("PATCH", `/${id}`, { is_active: false });
    expect(res.status).toBe(200);
    expect(res.body.is_active).toBe(false);
    afterCacheLifetime();
    expect(await validate(token)).toMatchObject({ valid: false, reason: "user_inactive" });
  });

  it("sets a password under the policy", async () => {
    const id = await createUser("pat");
    const short = await admin("POST", `/${id}/password`, { password: "too-short" });
    expect([short.status, short.reason, short.field]).toEqual([
      400,
      "PASSWORD_TOO_SHORT",
      "password",
    ]);
    const common = await admin("POST", `/${id}/password`, { password: "Password1234" });
    expect([common.status, common.reason, common.field]).toEqual([
      400,
      "PASSWORD_TOO_COMMON",
      "password",
    ]);
    const res = await admin("POST", `/${id}/password`, { password: "fresh-password-amber-kite" });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({});
    expect(
      (await rest("POST", "/auth/login", { body: { username: "pat", password: userPassword } }))
        .status,
    ).toBe(401);
    expect(await login("pat", "fresh-password-amber-kite")).toBeTruthy();
  });

  it("deletes a user and their sessions", async () => {
    const id = await createUser("dean");
    const token = await login("dean", userPassword);
    const res = await admin("DELETE", `/${id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({});
    expect(forgotten).toContain(id);
    const gone = await admin("GET", `/${id}`);
    expect([gone.status, gone.reason]).toEqual([404, "USER_NOT_FOUND"]);
    const again = await admin("DELETE", `/${id}`);
    expect([again.status, again.reason]).toEqual([404, "USER_NOT_FOUND"]);
    const { rows } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM sessions WHERE user_id = $1",
      [id],
    );
    expect(rows[0]?.n).toBe(0);
    afterCacheLifetime();
    expect(await validate(token)).toMatchObject({ valid: false, reason: "unknown_user" });
  });

  it("refuses to let an administrator lock themselves out", async () => {
    for (const res of [
      await admin("DELETE", `/${rootId}`),
      await admin("PATCH", `/${rootId}`, { is_active: false }),
      await admin("PATCH", `/${rootId}`, { roles: { values: ["viewer"] } }),
    ]) {
      expect(res.status).toBe(400);
      expect(res.body.code).toBe("failed_precondition");
      expect(res.reason).toBe("SELF_LOCKOUT");
    }
    expect((await validate(rootToken)).roles).toEqual(["admin"]);
  });

  it("answers 400 naming the field for invalid input", async () => {
    const cases: [string, string, unknown, string][] = [
      ["POST", "", { username: "x", password: userPassword }, "username"],
      ["POST", "", { username: "has space", password: userPassword }, "username"],
      ["POST", "", { username: "eve2", email: "not-an-email", password: userPassword }, "email"],
      ["POST", "", { username: "eve3", password: userPassword, roles: ["Admin!"] }, "roles"],
      ["POST", "", { username: "eve4", password: "short" }, "password"],
      ["GET", "/not-a-uuid", undefined, "user_id"],
      ["GET", "?page_size=500", undefined, "page_size"],
      ["GET", "?role=NOT%20A%20ROLE", undefined, "role"],
      ["PATCH", `/${rootId}`, { email: "nope" }, "email"],
      ["PATCH", `/${rootId}`, { roles: { values: ["BAD ROLE"] } }, "roles.values"],
      ["POST", "/not-a-uuid/password", { password: userPassword }, "user_id"],
    ];
    for (const [method, path, body, field] of cases) {
      const res = await admin(method, path, body);
      expect([res.status, res.body.code, res.field], `${method} ${path}`).toEqual([
        400,
        "invalid_argument",
        field,
      ]);
    }
  });
  it("says which field has the wrong shape and what shape it takes", async () => {
    // Roles are a RoleList, so that "no change" and "no roles" differ: {"roles": {"values": [...]}}.
    const res = await admin("PATCH", `/${rootId}`, { roles: ["clinician"] });
    expect([res.status, res.reason, res.field]).toEqual([400, "INVALID_FIELD", "roles"]);
    expect(res.body.message).toContain('roles: expected an object {"values": [...]}');
    expect(res.body.message).not.toContain("traitgate.identity.v1");
    const inner = await admin("PATCH", `/${rootId}`, { roles: { values: "clinician" } });
    expect([inner.status, inner.field]).toEqual([400, "roles.values"]);
    expect(inner.body.message).toContain("roles.values: expected an array of strings");
  });
});

describe("user administration over gRPC", () => {
  it("creates, lists, gets, updates, sets a password and deletes", async () => {
    const auth = bearer(rootToken);
    const { user } = await grpc.createUser(
      { username: "grace", email: "grace@example.test", password: userPassword, roles: ["viewer"] },
      auth,
    );
    expect(user).toMatchObject({ username: "grace", roles: ["viewer"], isActive: true });
    const id = user?.userId ?? "";
    const list = await grpc.listUsers({ q: "grac" }, auth);
    expect(list.users.map((u) => u.userId)).toEqual([id]);
    expect(list.nextPageToken).toBe("");
    expect((await grpc.getUser({ userId: id }, auth)).user?.email).toBe("grace@example.test");
    const updated = await grpc.updateUser(
      { userId: id, email: "", roles: { values: [] }, isActive: false },
      auth,
    );
    expect(updated.user).toMatchObject({ email: "", roles: [], isActive: false });
    await grpc.setUserPassword({ userId: id, password: "grpc-password-cobalt-fern" }, auth);
    await grpc.deleteUser({ userId: id }, auth);
    const missing = await grpc.getUser({ userId: id }, auth).catch((e: unknown) => e);
    expect(grpcFailure(missing)).toEqual({ code: Code.NotFound, reason: "USER_NOT_FOUND" });
  });

  it("answers InvalidArgument naming the field", async () => {
    const err = await grpc
      .getUser({ userId: "not-a-uuid" }, bearer(rootToken))
      .catch((e: unknown) => e);
    expect(grpcFailure(err)).toEqual({ code: Code.InvalidArgument, reason: "INVALID_FIELD" });
    expect(ConnectError.from(err).findDetails(ErrorInfoSchema)[0]?.metadata.field).toBe("user_id");
  });
});

describe("who may call", () => {
  const someId = "00000000-0000-4000-8000-000000000000";
  const restCalls: [string, string, unknown][] = [
    ["POST", "", { username: "mallory", password: userPassword }],
    ["GET", "", undefined],
    ["GET", `/${someId}`, undefined],
    ["PATCH", `/${someId}`, { is_active: false }],
    ["POST", `/${someId}/password`, { password: userPassword }],
    ["POST", `/${someId}/mfa:reset`, {}],
    ["DELETE", `/${someId}`, undefined],
  ];
  const grpcCalls = (options: { headers?: Record<string, string> }) => [
    grpc.createUser({ username: "mallory", password: userPassword }, options),
    grpc.listUsers({}, options),
    grpc.getUser({ userId: someId }, options),
    grpc.updateUser({ userId: someId, isActive: false }, options),
    grpc.setUserPassword({ userId: someId, password: userPassword }, options),
    grpc.resetUserMfa({ userId: someId }, options),
    grpc.deleteUser({ userId: someId }, options),
  ];

  it("refuses a viewer on every method, even with a key: 403 ROLE over REST, PermissionDenied over gRPC", async () => {
    for (const [method, path, body] of restCalls) {
      const res = await rest(method, `/api/admin/users${path}`, {
        body,
        token: viewerToken,
        key: rootKey,
      });
      expect([res.status, res.reason], `${method} ${path}`).toEqual([403, "ROLE"]);
    }
    const failures = await Promise.all(
      grpcCalls(bearer(viewerToken)).map((call) => call.then(() => undefined, grpcFailure)),
    );
    expect(failures).toEqual(Array(7).fill({ code: Code.PermissionDenied, reason: "ROLE" }));
    expect(UserAdminService.methods.length).toBe(7);
  });

  it("refuses an admin's token without an API key: 401 API_KEY_MISSING on every method", async () => {
    for (const [method, path, body] of restCalls) {
      const res = await rest(method, `/api/admin/users${path}`, { body, token: rootToken });
      expect([res.status, res.reason], `${method} ${path}`).toEqual([401, "API_KEY_MISSING"]);
    }
    const failures = await Promise.all(
      grpcCalls(bearer(rootToken, null)).map((call) => call.then(() => undefined, grpcFailure)),
    );
    expect(failures).toEqual(
      Array(7).fill({ code: Code.Unauthenticated, reason: "API_KEY_MISSING" }),
    );
  });

  it("refuses calls without a token: 401 over REST, Unauthenticated over gRPC", async () => {
    for (const [method, path, body] of restCalls) {
      const res = await rest(method, `/api/admin/users${path}`, { body });
      expect([res.status, res.reason], `${method} ${path}`).toEqual([401, "MISSING"]);
    }
    const failures = await Promise.all(
      grpcCalls({}).map((call) => call.then(() => undefined, grpcFailure)),
    );
    expect(failures).toEqual(Array(7).fill({ code: Code.Unauthenticated, reason: "MISSING" }));
  });
});

describe("audit trail", () => {
  it("records every change with actor, target, before/after and no password", async () => {
    const { rows } = await db.query<{
      action: string;
      actor_type: string;
      actor_id: string;
      target: string;
      outcome: string;
      request_id: string | null;
      details: Record<string, unknown>;
    }>(
      `SELECT action, actor_type, actor_id, target, outcome, request_id, details
       FROM audit_events WHERE action LIKE 'user\\_%' ORDER BY seq`,
    );
    // root and vic were created in beforeAll as the command line creates users: by the system.
    const bySystem = rows.filter((r) => r.actor_type === "system");
    expect(bySystem.map((r) => [r.action, r.actor_id, r.target])).toEqual([
      ["user_create", null, `user:${rootId}`],
      ["user_create", null, expect.stringMatching(/^user:[0-9a-f-]{36}$/)],
    ]);
    const byAdmin = rows.filter((r) => r.actor_type !== "system");
    const actions = new Set(byAdmin.map((r) => r.action));
    expect(actions).toEqual(
      new Set(["user_create", "user_update", "user_set_password", "user_delete"]),
    );
    for (const row of byAdmin) {
      expect(row).toMatchObject({ actor_type: "user", actor_id: rootId, outcome: "success" });
      expect(row.target).toMatch(/^user:[0-9a-f-]{36}$/);
      expect(row.request_id).toBeTruthy();
    }
    const roleChange = byAdmin.find(
      (r) =>
        r.action === "user_update" &&
        JSON.stringify(r.details.after) ===
          JSON.stringify({ roles: ["clinician", "auditor"], is_active: true }),
    );
    expect(roleChange?.details).toEqual({
      changed: ["roles"],
      before: { roles: ["viewer"], is_active: true },
      after: { roles: ["clinician", "auditor"], is_active: true },
      sessions_revoked: 0,
    });
    expect(byAdmin.find((r) => r.action === "user_delete")?.details).toMatchObject({
      before: { is_active: true },
    });
    const text = JSON.stringify(rows);
    for (const secret of [...passwords, "fresh-password-amber-kite", "grpc-password-cobalt-fern"]) {
      expect(text).not.toContain(secret);
    }
    expect(text).not.toContain("example.test");
    expect(await verifyAuditChain(db)).toMatchObject({ ok: true });
  });

  it("never writes a password to the logs", () => {
    const text = logs.join("");
    expect(text.length).toBeGreaterThan(0);
    for (const secret of [...passwords, "fresh-password-amber-kite", "grpc-password-cobalt-fern"]) {
      expect(text).not.toContain(secret);
    }
  });
});
