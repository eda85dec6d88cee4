import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Service accounts end to end: an admin creates one (secret shown once), the
 * service exchanges its client credentials for a short-lived token (body or
 * HTTP Basic), the token validates with the account's current roles, and stops
 * at once when the account is deactivated; secret rotation with a grace period.
 */

const password = "service-accounts-admin-pw";
let now = Date.now();
let server: TestServer;
let admin: string;
/** The X-API-Key header every administrative call carries with the admin's token. */
let adminKey: Record<string, string>;

beforeAll(async () => {
  server = await startTestServer({ clock: { now: () => now } });
  await server.createUser("root", password, ["admin"]);
  await server.createUser("vera", password, ["viewer"]);
  admin = await login("root");
  adminKey = {
    "x-api-key": await server.createApiKey([
      "service_accounts:read",
      "service_accounts:write",
      "users:read",
    ]),
  };
});
afterAll(async () => server?.close());

async function login(username: string): Promise<string> {
  const res = await callJson(server.url, "/auth/login", { username, password });
  expect(res.status).toBe(200);
  return res.body.token as string;
}

async function createAccount(name: string, roles: string[]) {
  const res = await callJson(
    server.url,
    "/api/admin/service-accounts",
    { name, roles },
    { token: admin, headers: adminKey },
  );
  expect(res.status).toBe(200);
  const account = res.body.service_account as { service_account_id: string; name: string };
  return { id: account.service_account_id, secret: res.body.client_secret as string };
}

const tokenFor = (clientId: string, clientSecret: string) =>
  callJson(server.url, "/auth/token", {
    grant_type: "client_credentials",
    client_id: clientId,
    client_secret: clientSecret,
  });

const validate = (token: string) =>
  callJson(server.url, "/auth/validate", undefined, { token, method: "GET" });

describe("client credentials", () => {
  it("gives a short-lived token that validates as a service with the account's roles", async () => {
    const { secret } = await createAccount("ai-core", ["service", "search"]);
    expect(secret).toMatch(/^tgs_[A-Za-z0-9_-]{43}$/);
    const res = await tokenFor("ai-core", secret);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ token_type: "Bearer", expires_in: 600 });
    const checked = await validate(res.body.access_token as string);
    expect(checked.body).toMatchObject({
      valid: true,
      principal_type: "service",
      username: "ai-core",
      roles: ["service", "search"],
    });
    // The secret was shown once: reading the account back never includes it.
    const list = await callJson(server.url, "/api/admin/service-accounts", undefined, {
      token: admin,
      headers: adminKey,
      method: "GET",
    });
    expect(list.status).toBe(200);
    expect(JSON.stringify(list.body)).not.toContain(secret);
    expect(server.logs.join("\n")).not.toContain(secret);
  });

  it("accepts HTTP Basic credentials and the gRPC protocol", async () => {
    const { secret } = await createAccount("basic-svc", ["service"]);
    const basic = Buffer.from(`basic-svc:${secret}`).toString("base64");
    const res = await callJson(
      server.url,
      "/auth/token",
      { grant_type: "client_credentials" },
      { headers: { authorization: `Basic ${basic}` } },
    );
    expect(res.status).toBe(200);
    const client = createClient(IdentityService, createGrpcTransport({ baseUrl: server.url }));
    const reply = await client.token({
      grantType: "client_credentials",
      clientId: "basic-svc",
      clientSecret: secret,
    });
    expect(reply.accessToken).not.toBe("");
  });

  it("refuses wrong, unknown and missing credentials alike, and audits the failures", async () => {
    const { id, secret } = await createAccount("wrong-secret-svc", []);
    const wrong = await tokenFor("wrong-secret-svc", `${secret.slice(0, -1)}x`);
    const unknown = await tokenFor("no-such-svc", secret);
    expect([wrong.status, wrong.reason]).toEqual([401, "INVALID_CLIENT"]);
    expect([unknown.status, unknown.reason]).toEqual([401, "INVALID_CLIENT"]);
    expect(wrong.body.message).toBe(unknown.body.message);
    const grant = await callJson(server.url, "/auth/token", {
      grant_type: "password",
      client_id: "wrong-secret-svc",
      client_secret: secret,
    });
    expect(grant.status).toBe(400);
    expect(JSON.stringify(grant.body)).toContain("grant_type");
    const { rows } = await server.core.db.query<{ actor_id: string | null; outcome: string }>(
      "SELECT actor_id, outcome FROM audit_events WHERE action = 'service_token' AND outcome = 'failure' ORDER BY seq",
    );
    expect(rows.map((r) => r.actor_id)).toEqual(expect.arrayContaining([id, null]));
  });

  it("keeps service tokens out of person-only calls and out of roles they do not hold", async () => {
    const { secret } = await createAccount("plain-svc", ["service"]);
    const token = (await tokenFor("plain-svc", secret)).body.access_token as string;
    const logout = await callJson(server.url, "/auth/logout", {}, { token });
    expect([logout.status, logout.reason]).toEqual([403, "USER_TOKEN_REQUIRED"]);
    const users = await callJson(server.url, "/api/admin/users", undefined, {
      token,
      headers: adminKey,
      method: "GET",
    });
    expect([users.status, users.reason]).toEqual([403, "ROLE"]);
  });
});

describe("administration", () => {
  it("deactivation stops the account's tokens at once and refuses new ones", async () => {
    const { id, secret } = await createAccount("leaving-svc", ["service"]);
    const token = (await tokenFor("leaving-svc", secret)).body.access_token as string;
    expect((await validate(token)).body.valid).toBe(true);
    const patched = await callJson(
      server.url,
      `/api/admin/service-accounts/${id}`,
      { is_active: false },
      { token: admin, method: "PATCH", headers: adminKey },
    );
    expect(patched.status).toBe(200);
    expect((await validate(token)).body).toMatchObject({ valid: false, reason: "user_inactive" });
    expect((await tokenFor("leaving-svc", secret)).reason).toBe("INVALID_CLIENT");
  });

  it("a role change applies to an unexpired token on its next validation", async () => {
    const { id, secret } = await createAccount("promoted-svc", ["service"]);
    const token = (await tokenFor("promoted-svc", secret)).body.access_token as string;
    await callJson(
      server.url,
      `/api/admin/service-accounts/${id}`,
      { roles: { values: ["service", "indexer"] } },
      { token: admin, method: "PATCH", headers: adminKey },
    );
    expect((await validate(token)).body.roles).toEqual(["service", "indexer"]);
  });

  it("rotates the secret: the old one works during the grace period only", async () => {
    const { id, secret: old } = await createAccount("rotating-svc", ["service"]);
    const rotated = await callJson(
      server.url,
      `/api/admin/service-accounts/${id}:rotate-secret`,
      { grace_seconds: 60 },
      { token: admin, headers: adminKey },
    );
    expect(rotated.status).toBe(200);
    const fresh = rotated.body.client_secret as string;
    expect(fresh).not.toBe(old);
    expect((await tokenFor("rotating-svc", fresh)).status).toBe(200);
    expect((await tokenFor("rotating-svc", old)).status).toBe(200);
    now += 61_000;
    expect((await tokenFor("rotating-svc", old)).reason).toBe("INVALID_CLIENT");
    expect((await tokenFor("rotating-svc", fresh)).status).toBe(200);
    // Without a grace period the old secret stops at once.
    const again = await callJson(
      server.url,
      `/api/admin/service-accounts/${id}:rotate-secret`,
      {},
      { token: admin, headers: adminKey },
    );
    expect((await tokenFor("rotating-svc", fresh)).reason).toBe("INVALID_CLIENT");
    expect((await tokenFor("rotating-svc", again.body.client_secret as string)).status).toBe(200);
  });

  it("deletes an account, after which its token does not validate", async () => {
    const { id, secret } = await createAccount("gone-svc", []);
    const token = (await tokenFor("gone-svc", secret)).body.access_token as string;
    const deleted = await callJson(server.url, `/api/admin/service-accounts/${id}`, undefined, {
      token: admin,
      headers: adminKey,
      method: "DELETE",
    });
    expect(deleted.status).toBe(200);
    expect((await validate(token)).body).toMatchObject({ valid: false, reason: "unknown_user" });
  });

  it("refuses a taken name, and a viewer, with clear reasons; audits every change", async () => {
    await createAccount("taken-svc", []);
    const dup = await callJson(
      server.url,
      "/api/admin/service-accounts",
      { name: "taken-svc" },
      { token: admin, headers: adminKey },
    );
    expect([dup.status, dup.reason]).toEqual([409, "SERVICE_ACCOUNT_EXISTS"]);
    const viewer = await login("vera");
    const refused = await callJson(
      server.url,
      "/api/admin/service-accounts",
      { name: "x-svc" },
      { token: viewer, headers: adminKey },
    );
    expect([refused.status, refused.reason]).toEqual([403, "ROLE"]);
    // An admin's token alone is not enough: administration takes an API key too.
    const keyless = await callJson(
      server.url,
      "/api/admin/service-accounts",
      { name: "keyless-svc" },
      { token: admin },
    );
    expect([keyless.status, keyless.reason]).toEqual([401, "API_KEY_MISSING"]);
    const bad = await callJson(
      server.url,
      "/api/admin/service-accounts",
      { name: "Bad Name" },
      { token: admin, headers: adminKey },
    );
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toContain("name");
    const { rows } = await server.core.db.query<{ action: string }>(
      "SELECT DISTINCT action FROM audit_events WHERE action LIKE 'service_account_%'",
    );
    expect(rows.map((r) => r.action).sort()).toEqual([
      "service_account_create",
      "service_account_delete",
      "service_account_rotate_secret",
      "service_account_update",
    ]);
  });
});
