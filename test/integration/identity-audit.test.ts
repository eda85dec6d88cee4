import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { databaseTargets, openTestDatabase, refusingAuditEvents } from "../support/database.js";
import { callJson, type JsonReply } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Identity changes and their audit events commit together or not at all: while the audit log
 * refuses an action's events, each change answers 503 AUDIT_UNAVAILABLE and leaves the
 * accounts, their sessions and MFA, and the allowlist as they were. Against the real core, on
 * PGlite and on PostgreSQL (TEST_DATABASE_URL).
 */

const password = "identity-audit-password";
const userPassword = "identity-audit-user-pw";

/** The TOTP code of `secret` `steps` steps from now (±1 step is accepted). */
const totp = (secret: string, steps = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

describe.each(databaseTargets())(
  "identity changes without their audit event, on $name",
  (target) => {
    let server: TestServer;
    let admin = "";
    /** The API key every administrative call carries with the admin's token. */
    let key = "";
    let names = 0;

    beforeAll(async () => {
      server = await startTestServer({ db: await openTestDatabase(target) });
      await server.createUser("root", password, ["admin"]);
      admin = await login("root", password);
      key = await server.createApiKey(["users:write", "service_accounts:write"]);
    });
    afterAll(async () => server?.close());

    const refusing = <T>(pattern: string, fn: () => Promise<T>) =>
      refusingAuditEvents(server.core.db, pattern, fn);

    const unavailable = (reply: JsonReply) => [reply.status, reply.reason];

    async function login(username: string, pw: string, totpCode?: string): Promise<string> {
      const res = await callJson(server.url, "/auth/login", {
        username,
        password: pw,
        ...(totpCode ? { totp_code: totpCode } : {}),
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.token as string;
    }

    const adminCall = (method: string, path: string, body?: unknown) =>
      callJson(
        server.url,
        path,
        body ?? (method === "GET" || method === "DELETE" ? undefined : {}),
        { token: admin, method, headers: { "x-api-key": key } },
      );

    const validate = async (token: string) =>
      (await callJson(server.url, "/auth/validate", undefined, { token, method: "GET" })).body;

    async function newUser(roles = ["viewer"]): Promise<{ id: string; username: string }> {
      const username = `user-${++names}`;
      const res = await adminCall("POST", "/api/admin/users", {
        username,
        password: userPassword,
        roles,
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return { id: res.body.user_id as string, username };
    }

    async function userRow(id: string) {
      const { rows } = await server.core.db.query<{
        roles: string[];
        is_active: boolean;
        password_hash: string;
        mfa_enabled: boolean;
        mfa_pending_secret: string | null;
      }>(
        "SELECT roles, is_active, password_hash, mfa_enabled, mfa_pending_secret FROM users WHERE id = $1",
        [id],
      );
      return rows[0];
    }

    async function openSessions(userId: string): Promise<number> {
      const { rows } = await server.core.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM sessions WHERE user_id = $1 AND revoked_at IS NULL",
        [userId],
      );
      return rows[0]?.n ?? 0;
    }

    async function unusedRecoveryCodes(userId: string): Promise<number> {
      const { rows } = await server.core.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM mfa_recovery_codes WHERE user_id = $1 AND used_at IS NULL",
        [userId],
      );
      return rows[0]?.n ?? 0;
    }

    async function events(action: string, target: string): Promise<number> {
      const { rows } = await server.core.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM audit_events WHERE action = $1 AND target = $2",
        [action, target],
      );
      return rows[0]?.n ?? 0;
    }

    /** A user with MFA on: their token, TOTP secret and recovery codes. */
    async function userWithMfa() {
      const user = await newUser();
      const token = await login(user.username, userPassword);
      const secret = (await callJson(server.url, "/auth/mfa/enroll", {}, { token })).body
        .secret as string;
      const activated = await callJson(
        server.url,
        "/auth/mfa/activate",
        { code: totp(secret) },
        {
          token,
        },
      );
      expect(activated.status).toBe(200);
      return { ...user, token, secret, recoveryCodes: activated.body.recovery_codes as string[] };
    }

    describe("user administration", () => {
      it("creates no user whose user_create event cannot be written", async () => {
        const created = await refusing("user\\_%", () =>
          adminCall("POST", "/api/admin/users", {
            username: "never-created",
            password: userPassword,
            roles: ["viewer"],
          }),
        );
        expect(unavailable(created)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        const { rows } = await server.core.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM users WHERE username = 'never-created'",
        );
        expect(rows[0]?.n).toBe(0);
      });

      it("changes no roles whose user_update event cannot be written", async () => {
        const user = await newUser(["viewer"]);
        const token = await login(user.username, userPassword);
        const patched = await refusing("user\\_%", () =>
          adminCall("PATCH", `/api/admin/users/${user.id}`, { roles: { values: ["admin"] } }),
        );
        expect(unavailable(patched)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.roles).toEqual(["viewer"]);
        expect(await validate(token)).toMatchObject({ valid: true, roles: ["viewer"] });
        expect(await events("user_update", `user:${user.id}`)).toBe(0);
      });

      it("deactivates no user, and revokes none of their sessions, without the event", async () => {
        const user = await newUser();
        const token = await login(user.username, userPassword);
        expect(await openSessions(user.id)).toBe(1);
        const patched = await refusing("user\\_%", () =>
          adminCall("PATCH", `/api/admin/users/${user.id}`, { is_active: false }),
        );
        expect(unavailable(patched)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.is_active).toBe(true);
        expect(await openSessions(user.id)).toBe(1);
        expect(await validate(token)).toMatchObject({ valid: true });
        // Applied once the event can be written, sessions revoked with it.
        const again = await adminCall("PATCH", `/api/admin/users/${user.id}`, { is_active: false });
        expect(again.status).toBe(200);
        expect(await openSessions(user.id)).toBe(0);
        expect(await validate(token)).toMatchObject({ valid: false });
      });

      it("reactivates no user whose user_update event cannot be written", async () => {
        const user = await newUser();
        expect(
          (await adminCall("PATCH", `/api/admin/users/${user.id}`, { is_active: false })).status,
        ).toBe(200);
        const patched = await refusing("user\\_%", () =>
          adminCall("PATCH", `/api/admin/users/${user.id}`, { is_active: true }),
        );
        expect(unavailable(patched)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.is_active).toBe(false);
        const refused = await callJson(server.url, "/auth/login", {
          username: user.username,
          password: userPassword,
        });
        expect(refused.status).toBe(401);
      });

      it("sets no password, and revokes no sessions, without the user_set_password event", async () => {
        const user = await newUser();
        const token = await login(user.username, userPassword);
        const hash = (await userRow(user.id))?.password_hash;
        const set = await refusing("user\\_%", () =>
          adminCall("POST", `/api/admin/users/${user.id}/password`, {
            password: "never-stored-password",
          }),
        );
        expect(unavailable(set)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.password_hash).toBe(hash);
        expect(await openSessions(user.id)).toBe(1);
        expect(await validate(token)).toMatchObject({ valid: true });
        await login(user.username, userPassword);
      });

      it("resets no MFA whose user_mfa_reset event cannot be written", async () => {
        const user = await userWithMfa();
        const reset = await refusing("user\\_%", () =>
          adminCall("POST", `/api/admin/users/${user.id}/mfa:reset`),
        );
        expect(unavailable(reset)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.mfa_enabled).toBe(true);
        expect(await unusedRecoveryCodes(user.id)).toBe(10);
        const withoutCode = await callJson(server.url, "/auth/login", {
          username: user.username,
          password: userPassword,
        });
        expect(withoutCode.reason).toBe("MFA_REQUIRED");
      });

      it("deletes no user whose user_delete event cannot be written", async () => {
        const user = await newUser();
        const token = await login(user.username, userPassword);
        const deleted = await refusing("user\\_%", () =>
          adminCall("DELETE", `/api/admin/users/${user.id}`),
        );
        expect(unavailable(deleted)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect(await userRow(user.id)).toBeDefined();
        expect(await openSessions(user.id)).toBe(1);
        expect(await validate(token)).toMatchObject({ valid: true });
      });
    });

    describe("service accounts", () => {
      const tokenFor = (clientId: string, clientSecret: string) =>
        callJson(server.url, "/auth/token", {
          grant_type: "client_credentials",
          client_id: clientId,
          client_secret: clientSecret,
        });

      async function newAccount(roles = ["service"]) {
        const name = `svc-${++names}`;
        const res = await adminCall("POST", "/api/admin/service-accounts", { name, roles });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        const account = res.body.service_account as { service_account_id: string };
        return { id: account.service_account_id, name, secret: res.body.client_secret as string };
      }

      async function accountRow(id: string) {
        const { rows } = await server.core.db.query<{ roles: string[]; secret_hash: Uint8Array }>(
          "SELECT roles, secret_hash FROM service_accounts WHERE id = $1",
          [id],
        );
        return rows[0];
      }

      it("creates no account whose service_account_create event cannot be written", async () => {
        const created = await refusing("service\\_account\\_%", () =>
          adminCall("POST", "/api/admin/service-accounts", { name: "never-svc", roles: [] }),
        );
        expect(unavailable(created)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect(created.body.client_secret).toBeUndefined();
        expect(await server.core.serviceAccounts.exists("never-svc")).toBe(false);
      });

      it("changes no account whose service_account_update event cannot be written", async () => {
        const account = await newAccount(["service"]);
        const patched = await refusing("service\\_account\\_%", () =>
          adminCall("PATCH", `/api/admin/service-accounts/${account.id}`, {
            roles: { values: ["admin"] },
            is_active: false,
          }),
        );
        expect(unavailable(patched)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await accountRow(account.id))?.roles).toEqual(["service"]);
        expect((await tokenFor(account.name, account.secret)).status).toBe(200);
      });

      it("rotates no secret whose service_account_rotate_secret event cannot be written", async () => {
        const account = await newAccount();
        const before = Buffer.from((await accountRow(account.id))?.secret_hash ?? []);
        const rotated = await refusing("service\\_account\\_%", () =>
          adminCall("POST", `/api/admin/service-accounts/${account.id}:rotate-secret`, {
            grace_seconds: 0,
          }),
        );
        expect(unavailable(rotated)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect(rotated.body.client_secret).toBeUndefined();
        expect(Buffer.from((await accountRow(account.id))?.secret_hash ?? [])).toEqual(before);
        expect((await tokenFor(account.name, account.secret)).status).toBe(200);
      });

      it("deletes neither the account nor its allowlist entries without the event", async () => {
        const account = await newAccount();
        const system = { kind: "system" as const, id: "" };
        const meta = { requestId: "identity-audit-test" };
        await server.core.plugins.register(
          system,
          meta,
          {
            id: "audit-target",
            name: "Audit target",
            pluginType: "internal",
            endpoints: { ping: "/ping" },
            host: "127.0.0.1",
            port: 8080,
            traits: [],
          },
          false,
        );
        await server.core.allowlist.put(system, meta, {
          caller: account.name,
          target: "audit-target",
          operations: ["ping"],
        });
        const deleted = await refusing("service\\_account\\_%", () =>
          adminCall("DELETE", `/api/admin/service-accounts/${account.id}`),
        );
        expect(unavailable(deleted)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect(await accountRow(account.id)).toBeDefined();
        expect(await server.core.allowlist.list({ caller: account.name })).toMatchObject([
          { caller: account.name, target: "audit-target", operations: ["ping"] },
        ]);
        expect((await tokenFor(account.name, account.secret)).status).toBe(200);
        // Once the event can be written, the account and its entries go together.
        expect(
          (await adminCall("DELETE", `/api/admin/service-accounts/${account.id}`)).status,
        ).toBe(200);
        expect(await accountRow(account.id)).toBeUndefined();
        expect(await server.core.allowlist.list({ caller: account.name })).toEqual([]);
      });
    });

    describe("a user's own MFA", () => {
      it("stores no pending secret whose mfa_enroll event cannot be written", async () => {
        const user = await newUser();
        const token = await login(user.username, userPassword);
        const enrolled = await refusing("mfa\\_%", () =>
          callJson(server.url, "/auth/mfa/enroll", {}, { token }),
        );
        expect(unavailable(enrolled)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect(enrolled.body.secret).toBeUndefined();
        expect((await userRow(user.id))?.mfa_pending_secret).toBeNull();
      });

      it("turns MFA on only with its mfa_activate event", async () => {
        const user = await newUser();
        const token = await login(user.username, userPassword);
        const secret = (await callJson(server.url, "/auth/mfa/enroll", {}, { token })).body
          .secret as string;
        const code = totp(secret);
        const activated = await refusing("mfa\\_%", () =>
          callJson(server.url, "/auth/mfa/activate", { code }, { token }),
        );
        expect(unavailable(activated)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect(activated.body.recovery_codes).toBeUndefined();
        const row = await userRow(user.id);
        expect([row?.mfa_enabled, row?.mfa_pending_secret]).toEqual([false, expect.any(String)]);
        expect(await unusedRecoveryCodes(user.id)).toBe(0);
        // Nothing was used up: the same code activates once the event can be written.
        expect((await callJson(server.url, "/auth/mfa/activate", { code }, { token })).status).toBe(
          200,
        );
        expect((await userRow(user.id))?.mfa_enabled).toBe(true);
      });

      it("keeps MFA on, and the TOTP code's step unused, when the mfa_disable event cannot be written", async () => {
        const user = await userWithMfa();
        const token = await login(user.username, userPassword, user.recoveryCodes[0]);
        // The activation used the current step: the next one is still unused (±1 step is accepted).
        const code = totp(user.secret, 1);
        const disabled = await refusing("mfa\\_%", () =>
          callJson(server.url, "/auth/mfa/disable", { code }, { token }),
        );
        expect(unavailable(disabled)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.mfa_enabled).toBe(true);
        expect(await unusedRecoveryCodes(user.id)).toBe(9);
        // The step was not recorded as used: the same code works, once.
        expect((await callJson(server.url, "/auth/mfa/disable", { code }, { token })).status).toBe(
          200,
        );
        expect((await userRow(user.id))?.mfa_enabled).toBe(false);
      });

      it("keeps MFA on, and the code unused, when the mfa_disable event cannot be written", async () => {
        const user = await userWithMfa();
        const token = await login(user.username, userPassword, user.recoveryCodes[0]);
        const disabled = await refusing("mfa\\_%", () =>
          callJson(server.url, "/auth/mfa/disable", { code: user.recoveryCodes[1] }, { token }),
        );
        expect(unavailable(disabled)).toEqual([503, "AUDIT_UNAVAILABLE"]);
        expect((await userRow(user.id))?.mfa_enabled).toBe(true);
        expect(await unusedRecoveryCodes(user.id)).toBe(9);
        const withoutCode = await callJson(server.url, "/auth/login", {
          username: user.username,
          password: userPassword,
        });
        expect(withoutCode.reason).toBe("MFA_REQUIRED");
        // The code still works, once.
        expect(
          (
            await callJson(
              server.url,
              "/auth/mfa/disable",
              { code: user.recoveryCodes[1] },
              { token },
            )
          ).status,
        ).toBe(200);
      });
    });
  },
);
