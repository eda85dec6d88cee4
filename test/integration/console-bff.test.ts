import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consoleCall, consoleSignIn, rpcReason } from "../support/console.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The console's backend-for-frontend without a browser: what the cookie stands for stays on
 * the server, sealed; tokens are refreshed behind it; revoking the login (logout-all, a
 * password change, a deactivation) ends the console session at its next request.
 */
describe("admin console backend-for-frontend", () => {
  let server: TestServer;
  let apiKey: string;
  const admin = { username: "root-console", password: "Console-Admin-Pass-7391" };
  const settingsRpc = "/console/rpc/traitgate.settings.v1.SettingsService/GetSettings";

  beforeAll(async () => {
    // Access tokens of 60 s: each console call refreshes (it refreshes a minute ahead).
    server = await startTestServer({ env: { TOKEN_TTL_SECONDS: "60" } });
    await server.createUser(admin.username, admin.password, ["auditor"]);
    apiKey = await server.createApiKey(["settings:read", "audit:read"]);
  });
  afterAll(() => server?.close());

  it("keeps the tokens and the API key on the server, sealed", async () => {
    const cookie = await consoleSignIn(server.url, admin, apiKey);
    const session = await consoleCall(server.url, "/console/api/session", {}, cookie);
    expect(session.body).toMatchObject({
      stage: "active",
      access: "console",
      user: { username: admin.username, roles: ["auditor"] },
      api_key: { scopes: ["settings:read", "audit:read"] },
    });
    const text = JSON.stringify(session.body);
    expect(text).not.toContain(apiKey);
    expect(text).not.toMatch(/eyJ[A-Za-z0-9_-]+\./);
    const rows = await server.core.db.query<Record<string, unknown>>(
      "SELECT * FROM console_sessions",
    );
    const stored = JSON.stringify(rows.rows);
    expect(stored).not.toContain(apiKey);
    expect(stored).not.toContain(cookie.split("=")[1]);
    expect(stored).not.toMatch(/eyJ[A-Za-z0-9_-]+\./);
    expect(String(rows.rows[0]?.sealed)).toMatch(/^tg1\./);
  });

  it("refreshes the access token behind the cookie, also for calls made together", async () => {
    const cookie = await consoleSignIn(server.url, admin, apiKey);
    const before = await refreshTokenCount();
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => consoleCall(server.url, settingsRpc, {}, cookie)),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    const afterTogether = await refreshTokenCount();
    expect(afterTogether).toBeGreaterThan(before);
    expect(afterTogether).toBeLessThanOrEqual(before + 5);
    // Later calls go on refreshing; the rotation never trips the reuse detection.
    for (let i = 0; i < 3; i++) {
      expect((await consoleCall(server.url, settingsRpc, {}, cookie)).status).toBe(200);
    }
    expect(await refreshTokenCount()).toBe(afterTogether + 3);
  });

  it("ends the console session when the user logs out everywhere", async () => {
    const cookie = await consoleSignIn(server.url, admin, apiKey);
    const token = (await callJson(server.url, "/auth/login", admin)).body.token as string;
    expect((await callJson(server.url, "/auth/logout-all", {}, { token })).status).toBe(200);
    const res = await consoleCall(server.url, settingsRpc, {}, cookie);
    expect(res.status).toBe(401);
    expect(res.headers.get("x-console-session")).toBe("ended");
    expect((await consoleCall(server.url, "/console/api/session", {}, cookie)).body.stage).toBe(
      "signed_out",
    );
  });

  it("ends the console session when the password changes elsewhere", async () => {
    const cookie = await consoleSignIn(server.url, admin, apiKey);
    const token = (await callJson(server.url, "/auth/login", admin)).body.token as string;
    const next = "Console-Admin-Pass-7392";
    const change = await callJson(
      server.url,
      "/auth/password",
      { current_password: admin.password, new_password: next },
      { token },
    );
    expect(change.status).toBe(200);
    admin.password = next;
    const session = await consoleCall(server.url, "/console/api/session", {}, cookie);
    expect(session.body).toMatchObject({ stage: "signed_out", ended: true });
  });

  it("refuses a wrong API key next to its field, and a session without one", async () => {
    const cookie = await consoleSignIn(server.url, admin);
    const wrong = await consoleCall(
      server.url,
      "/console/api/api-key",
      { api_key: "tgk_nothing_x" },
      cookie,
    );
    expect(wrong).toMatchObject({
      status: 400,
      body: { reason: "API_KEY_INVALID", field: "api_key" },
    });
    const rpc = await consoleCall(server.url, settingsRpc, {}, cookie);
    expect(rpc.status).toBe(401);
    expect(rpcReason(rpc.body)).toBe("CONSOLE_SESSION");
  });

  it("answers a wrong password in the identity service's words", async () => {
    const res = await consoleCall(server.url, "/console/api/sign-in", {
      username: admin.username,
      password: "nope-nope-nope",
    });
    expect(res).toMatchObject({ status: 401, body: { reason: "INVALID_CREDENTIALS" } });
    expect(res.headers.get("set-cookie")).toBeNull();
  });

  async function refreshTokenCount(): Promise<number> {
    const { rows } = await server.core.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM refresh_tokens",
    );
    return rows[0]?.n ?? 0;
  }
});
