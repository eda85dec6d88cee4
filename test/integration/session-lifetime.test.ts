import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Refresh re-checks what login checks (the account is active, MFA when it is required, the
 * current roles), and a session has an absolute lifetime from its login
 * (SESSION_MAX_LIFETIME_SECONDS, default 12 h) that rotations do not extend. A real server
 * over REST, with its database on PGlite and on PostgreSQL.
 */

const password = "session lifetime harbour 5510";
const maxLifetime = 43_200;

interface Tokens {
  token: string;
  expires_in: number;
  refresh_token: string;
  refresh_expires_in: number;
}

const claimsOf = (token: string) =>
  JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString()) as {
    roles: string[];
    sid: string;
  };

describe.each(databaseTargets())("sessions on $name", (target) => {
  let server: TestServer;
  let rootToken: string;
  let settingsKey: string;

  beforeAll(async () => {
    server = await startTestServer({ db: await openTestDatabase(target) });
    await server.createUser("root", password, ["admin"]);
    rootToken = (await login("root")).token;
    settingsKey = await server.createApiKey(["settings:read", "settings:write"]);
  });
  afterAll(async () => server?.close());

  async function login(username: string): Promise<Tokens> {
    const res = await callJson(server.url, "/auth/login", { username, password });
    expect(res.status).toBe(200);
    return res.body as unknown as Tokens;
  }
  const refresh = (refreshToken: string) =>
    callJson(server.url, "/auth/refresh", { refresh_token: refreshToken });
  const validate = async (token: string) =>
    (await callJson(server.url, "/auth/validate", undefined, { token, method: "GET" })).body;
  const setMfaRequired = async (value: boolean | null) => {
    const res = await callJson(
      server.url,
      "/api/admin/settings",
      { "auth.mfa_required": value },
      { token: rootToken, headers: { "x-api-key": settingsKey } },
    );
    expect(res.status).toBe(200);
  };
  const sql = (text: string, params: unknown[]) => server.core.db.query(text, params);

  it("refuses a refresh under MFA_REQUIRED for a user without MFA, and ends the session", async () => {
    await server.createUser("mia", password, ["admin"]);
    const held = await login("mia");
    const enrolled = await server.createUser("ned", password, ["admin"]);
    const nedTokens = await login("ned");
    await sql("UPDATE users SET mfa_enabled = true WHERE id = $1", [enrolled]);
    await setMfaRequired(true);
    try {
      const res = await refresh(held.refresh_token);
      expect([res.status, res.reason]).toEqual([401, "MFA_ENROLLMENT_REQUIRED"]);
      expect(res.body.token).toBeUndefined();
      expect(await validate(held.token)).toMatchObject({ valid: false, reason: "revoked" });
      const again = await refresh(held.refresh_token);
      expect(again.status).toBe(401);
      // A user with MFA keeps refreshing.
      const ned = await refresh(nedTokens.refresh_token);
      expect(ned.status).toBe(200);
      const users = await callJson(server.url, "/api/admin/users", undefined, {
        token: ned.body.token as string,
        method: "GET",
        headers: { "x-api-key": await server.createApiKey(["users:read"]) },
      });
      expect(users.status).toBe(200);
      // Logging in again gives what login gives such a user: an enrolment-only token.
      const relogin = await login("mia");
      expect(relogin.refresh_token).toBe("");
      expect(await validate(relogin.token)).toMatchObject({
        valid: false,
        reason: "mfa_enrollment_required",
      });
    } finally {
      await setMfaRequired(null);
    }
  });

  it("refuses a refresh of a user deactivated since the login, and issues current roles", async () => {
    const id = await server.createUser("olga", password, ["viewer"]);
    const first = await login("olga");
    // Changed behind the server's back: refresh reads the user afresh, as login does.
    await sql("UPDATE users SET roles = $2 WHERE id = $1", [id, ["auditor"]]);
    const rotated = await refresh(first.refresh_token);
    expect(rotated.status).toBe(200);
    expect(claimsOf(rotated.body.token as string).roles).toEqual(["auditor"]);
    await sql("UPDATE users SET is_active = false WHERE id = $1", [id]);
    const refused = await refresh(rotated.body.refresh_token as string);
    expect([refused.status, refused.reason]).toEqual([401, "INVALID_REFRESH_TOKEN"]);
  });

  it("ends a session at its absolute lifetime, however often it was refreshed", async () => {
    await server.createUser("pete", password, ["viewer"]);
    const first = await login("pete");
    expect(first.refresh_expires_in).toBe(maxLifetime);
    const sid = claimsOf(first.token).sid;
    // Two minutes before the session's end: the new tokens last no longer than the session.
    await sql("UPDATE sessions SET created_at = now() - make_interval(secs => $2) WHERE id = $1", [
      sid,
      maxLifetime - 120,
    ]);
    const late = await refresh(first.refresh_token);
    expect(late.status).toBe(200);
    const lateTokens = late.body as unknown as Tokens;
    expect(lateTokens.refresh_expires_in).toBeGreaterThan(0);
    expect(lateTokens.refresh_expires_in).toBeLessThanOrEqual(120);
    expect(lateTokens.expires_in).toBeLessThanOrEqual(120);
    const { rows } = await sql(
      `SELECT bool_and(t.expires_at <= s.created_at + make_interval(secs => $2)) AS capped
         FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
        WHERE s.id = $1 AND t.used_at IS NULL`,
      [sid, maxLifetime],
    );
    expect(rows[0]).toEqual({ capped: true });
    // Past the end (refresh tokens issued before this release were not capped: move it too).
    await sql("UPDATE sessions SET created_at = now() - make_interval(secs => $2) WHERE id = $1", [
      sid,
      maxLifetime + 1,
    ]);
    await sql(
      "UPDATE refresh_tokens SET expires_at = now() + interval '7 days' WHERE session_id = $1",
      [sid],
    );
    const ended = await refresh(lateTokens.refresh_token);
    expect([ended.status, ended.reason]).toEqual([401, "INVALID_REFRESH_TOKEN"]);
  });
});
