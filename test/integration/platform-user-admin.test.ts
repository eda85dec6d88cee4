import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.js";

/** User administration as wired into the real core (src/platform.ts). */

const password = "platform-admin-password";
let server: TestServer;
/** users:read and users:write: administration takes an admin's token and a scoped API key. */
let key = "";

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("root", password, ["admin"]);
  await server.createUser("vera", password, ["viewer"]);
  key = await server.createApiKey(["users:read", "users:write"]);
});
afterAll(async () => server?.close());

async function login(username: string, pw = password) {
  const res = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password: pw }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { token: string; refresh_token: string };
}

const token = async (username: string, pw = password) => (await login(username, pw)).token;

/** The status and reason of a refresh with this token. */
async function refreshWith(refreshToken: string) {
  const res = await fetch(`${server.url}/auth/refresh`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ refresh_token: refreshToken }),
  });
  const body = (await res.json()) as { details?: { reason?: string }[] };
  return [res.status, body.details?.[0]?.reason];
}

/** A call with a bearer token, and the API key on the administrative paths. */
async function call(method: string, path: string, bearer: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${bearer}`,
      ...(path.startsWith("/api/admin/") ? { "x-api-key": key } : {}),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe("user administration in the core", () => {
  it("lets an admin create and deactivate a user, whose token stops at once", async () => {
    const admin = await token("root");
    const created = await call("POST", "/api/admin/users", admin, {
      username: "newhire",
      email: "newhire@example.test",
      password: "newhire-password-long",
      roles: ["clinician"],
    });
    expect(created.body).toMatchObject({ username: "newhire" });
    expect(created.status).toBe(200);
    const id = created.body.user_id as string;
    const session = await login("newhire", "newhire-password-long");
    const theirs = session.token;
    const before = await fetch(`${server.url}/auth/validate`, {
      headers: { authorization: `Bearer ${theirs}` },
    });
    // Validated once, so this process has the user's state cached.
    expect(await before.json()).toMatchObject({ valid: true, roles: ["clinician"] });
    const patched = await call("PATCH", `/api/admin/users/${id}`, admin, { is_active: false });
    expect(patched.status).toBe(200);
    const validate = await fetch(`${server.url}/auth/validate`, {
      headers: { authorization: `Bearer ${theirs}` },
    });
    expect(await validate.json()).toMatchObject({ valid: false, reason: "user_inactive" });
    // Reactivation does not bring the session back: deactivation revoked it.
    expect((await call("PATCH", `/api/admin/users/${id}`, admin, { is_active: true })).status).toBe(
      200,
    );
    const after = await fetch(`${server.url}/auth/validate`, {
      headers: { authorization: `Bearer ${theirs}` },
    });
    expect(await after.json()).toMatchObject({ valid: false, reason: "revoked" });
    expect(await refreshWith(session.refresh_token)).toEqual([401, "INVALID_REFRESH_TOKEN"]);
  });

  it("lets an admin set a user's password, after which their validated token is revoked at once", async () => {
    const admin = await token("root");
    const created = await call("POST", "/api/admin/users", admin, {
      username: "forgetful",
      email: "",
      password: "forgetful-password-long",
      roles: ["viewer"],
    });
    expect(created.status).toBe(200);
    const id = created.body.user_id as string;
    const session = await login("forgetful", "forgetful-password-long");
    const theirs = session.token;
    // Validated once, so this process has the session's state cached.
    expect((await call("GET", "/auth/validate", theirs)).body).toMatchObject({ valid: true });
    const set = await call("POST", `/api/admin/users/${id}/password`, admin, {
      password: "another-password-long",
    });
    expect(set.status).toBe(200);
    expect((await call("GET", "/auth/validate", theirs)).body).toMatchObject({
      valid: false,
      reason: "revoked",
    });
    expect(await refreshWith(session.refresh_token)).toEqual([401, "INVALID_REFRESH_TOKEN"]);
    await token("forgetful", "another-password-long");
  });

  it("refuses a viewer (even with a key) with 403 ROLE, and a caller without a token with 401; audits both", async () => {
    const viewer = await token("vera");
    const res = await call("GET", "/api/admin/users", viewer);
    expect(res.status).toBe(403);
    expect((res.body.details as { reason: string }[])[0]?.reason).toBe("ROLE");
    const anonymous = await fetch(`${server.url}/api/admin/users`);
    expect(anonymous.status).toBe(401);
    const { rows } = await server.core.db.query<{
      actor_type: string;
      target: string;
      details: { reason: string };
    }>(
      "SELECT actor_type, target, details FROM audit_events WHERE action = 'access_denied' ORDER BY seq",
    );
    expect(rows.map((r) => [r.actor_type, r.target, r.details.reason])).toEqual([
      ["user", "rpc:traitgate.identity.v1.UserAdminService/ListUsers", "ROLE"],
      ["anonymous", "rpc:traitgate.identity.v1.UserAdminService/ListUsers", "MISSING"],
    ]);
  });

  it("lets an admin reset a user's MFA, after which they log in with the password alone", async () => {
    const admin = await token("root");
    const created = await call("POST", "/api/admin/users", admin, {
      username: "lostphone",
      email: "",
      password: "lostphone-password-long",
      roles: ["viewer"],
    });
    const id = created.body.user_id as string;
    const own = await token("lostphone", "lostphone-password-long");
    const secret = (await call("POST", "/auth/mfa/enroll", own, {})).body.secret as string;
    const first = generateSync({ secret, epoch: Math.floor(Date.now() / 1000) });
    expect((await call("POST", "/auth/mfa/activate", own, { code: first })).status).toBe(200);
    const withoutCode = await fetch(`${server.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "lostphone", password: "lostphone-password-long" }),
    });
    expect(withoutCode.status).toBe(401);

    const viewer = await token("vera");
    expect((await call("POST", `/api/admin/users/${id}/mfa:reset`, viewer, {})).status).toBe(403);
    expect((await call("POST", `/api/admin/users/${id}/mfa:reset`, admin, {})).status).toBe(200);
    await token("lostphone", "lostphone-password-long");
    const { rows } = await server.core.db.query<{ details: { mfa_was_enabled: boolean } }>(
      "SELECT details FROM audit_events WHERE action = 'user_mfa_reset' AND target = $1",
      [`user:${id}`],
    );
    expect(rows).toEqual([{ details: { mfa_was_enabled: true } }]);
  });
});
