import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

const password = "mfa-user-password-long";
let server: TestServer;
let userId: string;

beforeAll(async () => {
  server = await startTestServer();
  userId = await server.createUser("mia", password);
});
afterAll(async () => server?.close());

const post = (path: string, body: unknown, token?: string) =>
  callJson(server.url, path, body, { token });

/** The TOTP code of `secret` `steps` steps from now (±1 step is accepted). */
const code = (secret: string, steps = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

describe("TOTP MFA", () => {
  let secret = "";
  let recoveryCodes: string[] = [];

  it("enrols, keeps the secret sealed at rest, and activates with a first code", async () => {
    const { token } = (await post("/auth/login", { username: "mia", password })).body as {
      token: string;
    };
    const enrol = await post("/auth/mfa/enroll", {}, token);
    expect(enrol.status).toBe(200);
    secret = enrol.body.secret as string;
    expect(secret).toMatch(/^[A-Z2-7]{16,}$/);
    expect(enrol.body.otpauth_uri).toMatch(/^otpauth:\/\/totp\//);
    const { rows } = await server.core.db.query<Record<string, string | null>>(
      "SELECT mfa_pending_secret FROM users WHERE id = $1",
      [userId],
    );
    expect(rows[0]?.mfa_pending_secret).toMatch(/^tg1\./);
    expect(JSON.stringify(rows)).not.toContain(secret);

    expect((await post("/auth/mfa/activate", { code: "000000" }, token)).reason).toBe(
      "INVALID_MFA_CODE",
    );
    const activate = await post("/auth/mfa/activate", { code: code(secret) }, token);
    expect(activate.status).toBe(200);
    recoveryCodes = activate.body.recovery_codes as string[];
    expect(recoveryCodes).toHaveLength(10);
    const stored = await server.core.db.query<Record<string, unknown>>(
      "SELECT u.mfa_secret, u.mfa_enabled, r.code_hash FROM users u JOIN mfa_recovery_codes r ON r.user_id = u.id WHERE u.id = $1",
      [userId],
    );
    expect(stored.rows[0]?.mfa_enabled).toBe(true);
    expect(JSON.stringify(stored.rows)).not.toContain(secret);
    for (const c of recoveryCodes) expect(JSON.stringify(stored.rows)).not.toContain(c);
  });

  it("asks for the second factor, accepts a code once, and refuses it again", async () => {
    const without = await post("/auth/login", { username: "mia", password });
    expect(without).toMatchObject({ status: 401, reason: "MFA_REQUIRED" });
    // The activation used the current step; the next step's code is within the window.
    const next = code(secret, 1);
    const first = await post("/auth/login", { username: "mia", password, totp_code: next });
    expect(first.status).toBe(200);
    const replay = await post("/auth/login", { username: "mia", password, totp_code: next });
    expect(replay).toMatchObject({ status: 401, reason: "INVALID_MFA_CODE" });
  });

  it("accepts a recovery code once", async () => {
    const recovery = recoveryCodes[0] ?? "";
    const ok = await post("/auth/login", {
      username: "mia",
      password,
      totp_code: recovery.toUpperCase(),
    });
    expect(ok.status).toBe(200);
    const again = await post("/auth/login", { username: "mia", password, totp_code: recovery });
    expect(again).toMatchObject({ status: 401, reason: "INVALID_MFA_CODE" });
  });

  it("does not reveal MFA to someone without the password", async () => {
    const res = await post("/auth/login", { username: "mia", password: "wrong-password-here" });
    expect(res).toMatchObject({ status: 401, reason: "INVALID_CREDENTIALS" });
  });

  it("disables MFA with a recovery code, and audits every step", async () => {
    const login = await post("/auth/login", {
      username: "mia",
      password,
      totp_code: recoveryCodes[1],
    });
    const token = login.body.token as string;
    expect((await post("/auth/mfa/disable", { code: "nonsense-code" }, token)).reason).toBe(
      "INVALID_MFA_CODE",
    );
    expect((await post("/auth/mfa/disable", { code: recoveryCodes[2] }, token)).status).toBe(200);
    expect((await post("/auth/login", { username: "mia", password })).status).toBe(200);
    const { rows } = await server.core.db.query<{ action: string; outcome: string }>(
      "SELECT action, outcome FROM audit_events WHERE action LIKE 'mfa_%' ORDER BY seq",
    );
    expect(rows.map((r) => `${r.action}:${r.outcome}`)).toEqual([
      "mfa_enroll:success",
      "mfa_activate:failure",
      "mfa_activate:success",
      "mfa_disable:failure",
      "mfa_disable:success",
    ]);
    expect(server.logs.join("")).not.toContain(secret);
  });

  it("needs an access token to enrol", async () => {
    expect((await post("/auth/mfa/enroll", {})).status).toBe(401);
  });
});

describe("MFA_REQUIRED=true", () => {
  let strict: TestServer;
  beforeAll(async () => {
    strict = await startTestServer({ env: { MFA_REQUIRED: "true" } });
    await strict.createUser("newbie", password);
  });
  afterAll(async () => strict?.close());

  const call = (path: string, body: unknown, token?: string) =>
    callJson(strict.url, path, body, { token });

  it("gives a user without MFA a token that can enrol and nothing else", async () => {
    const login = await call("/auth/login", { username: "newbie", password });
    expect(login.status).toBe(200);
    expect(login.body.refresh_token).toBe("");
    const token = login.body.token as string;
    const validate = await fetch(`${strict.url}/auth/validate`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(await validate.json()).toMatchObject({
      valid: false,
      reason: "mfa_enrollment_required",
    });
    expect(await call("/auth/logout", {}, token)).toMatchObject({
      status: 401,
      reason: "MFA_ENROLLMENT_REQUIRED",
    });

    const enrol = await call("/auth/mfa/enroll", {}, token);
    expect(enrol.status).toBe(200);
    const secret = enrol.body.secret as string;
    expect((await call("/auth/mfa/activate", { code: code(secret) }, token)).status).toBe(200);

    expect((await call("/auth/login", { username: "newbie", password })).reason).toBe(
      "MFA_REQUIRED",
    );
    const full = await call("/auth/login", {
      username: "newbie",
      password,
      totp_code: code(secret, 1),
    });
    expect(full.status).toBe(200);
    expect(full.body.refresh_token).toMatch(/^rt_/);
    const ok = await fetch(`${strict.url}/auth/validate`, {
      headers: { authorization: `Bearer ${full.body.token as string}` },
    });
    expect(await ok.json()).toMatchObject({ valid: true });
  });
});
