import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refusingAuditEvents } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Users change their own password with the current one: the policy applies to
 * the new one, a wrong current one is refused and audited, the user's other
 * sessions are revoked and the calling one stays.
 */

const oldPassword = "original-password-value";
const newPassword = "replacement-password-value";
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("carol", oldPassword, ["viewer"]);
});
afterAll(async () => server?.close());

const login = (password: string) =>
  callJson(server.url, "/auth/login", { username: "carol", password });
const change = (token: string, current: string, next: string) =>
  callJson(
    server.url,
    "/auth/password",
    { current_password: current, new_password: next },
    { token },
  );
const validate = (token: string) =>
  callJson(server.url, "/auth/validate", undefined, { token, method: "GET" });

describe("changing one's own password", () => {
  it("refuses a wrong current password and a new one the policy refuses, changing nothing", async () => {
    const token = (await login(oldPassword)).body.token as string;
    const wrong = await change(token, "not-the-password", newPassword);
    expect([wrong.status, wrong.reason]).toEqual([400, "WRONG_PASSWORD"]);
    const weak = await change(token, oldPassword, "short");
    expect([weak.status, weak.reason]).toEqual([400, "PASSWORD_TOO_SHORT"]);
    expect(JSON.stringify(weak.body)).toContain("new_password");
    const common = await change(token, oldPassword, "correct horse battery staple");
    expect([common.status, common.reason]).toEqual([400, "PASSWORD_TOO_COMMON"]);
    const same = await change(token, oldPassword, oldPassword);
    expect([same.status, same.reason]).toEqual([400, "PASSWORD_UNCHANGED"]);
    expect((await login(oldPassword)).status).toBe(200);
    const { rows } = await server.core.db.query<{ outcome: string }>(
      "SELECT outcome FROM audit_events WHERE action = 'password_change'",
    );
    expect(rows.map((r) => r.outcome)).toEqual(["failure"]);
  });

  it("changes nothing, and revokes no session, when its audit event cannot be written", async () => {
    const other = (await login(oldPassword)).body.token as string;
    const mine = (await login(oldPassword)).body.token as string;
    const res = await refusingAuditEvents(server.core.db, "password\\_change", () =>
      change(mine, oldPassword, newPassword),
    );
    expect([res.status, res.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
    expect((await validate(other)).body.valid).toBe(true);
    expect((await login(oldPassword)).status).toBe(200);
  });

  it("changes it, revokes the other sessions and keeps the calling one", async () => {
    const other = (await login(oldPassword)).body.token as string;
    const mine = (await login(oldPassword)).body.token as string;
    const res = await change(mine, oldPassword, newPassword);
    expect(res.status).toBe(200);
    expect(res.body.sessions_revoked).toBeGreaterThanOrEqual(1);
    expect((await validate(mine)).body.valid).toBe(true);
    expect((await validate(other)).body).toMatchObject({ valid: false, reason: "revoked" });
    expect((await login(oldPassword)).status).toBe(401);
    expect((await login(newPassword)).status).toBe(200);
    const logs = server.logs.join("\n");
    expect(logs).not.toContain(newPassword);
    expect(logs).not.toContain(oldPassword);
  });

  it("needs a token", async () => {
    const res = await callJson(server.url, "/auth/password", {
      current_password: newPassword,
      new_password: "yet-another-password-value",
    });
    expect(res.status).toBe(401);
  });
});
