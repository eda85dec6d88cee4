import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verifyAuditChain } from "../../src/audit/index.js";
import { countEvents } from "../audit/events.js";
import { databaseTargets, openTestDatabase, refusingAuditEvents } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The operator's user changes (src/identity/user-management.ts: `traitgate users create`, demo
 * mode) against the real core, on PGlite and on PostgreSQL (TEST_DATABASE_URL): each commits
 * with one audit event by the system actor, or, when that event cannot be written, is refused
 * with AUDIT_UNAVAILABLE and changes nothing.
 */

const password = "operator-change-password";
const newPassword = "operator-new-password";
const meta = { requestId: "cli-test" };

interface EventRow {
  actor_type: string;
  actor_id: string | null;
  action: string;
  target: string | null;
  outcome: string;
  request_id: string | null;
  details: Record<string, unknown>;
}

describe.each(databaseTargets())("the operator's user changes, on $name", (target) => {
  let server: TestServer;
  let names = 0;

  beforeAll(async () => {
    server = await startTestServer({ db: await openTestDatabase(target) });
  });
  afterAll(async () => server?.close());

  const nextName = () => `op-user-${++names}`;

  /** The events `fn` wrote, oldest first. */
  async function eventsOf(fn: () => Promise<unknown>): Promise<EventRow[]> {
    const before = await countEvents(server.core.db);
    await fn();
    const { rows } = await server.core.db.query<EventRow>(
      `SELECT actor_type, actor_id, action, target, outcome, request_id, details
       FROM audit_events ORDER BY seq DESC LIMIT $1`,
      [(await countEvents(server.core.db)) - before],
    );
    return rows.reverse();
  }

  /** Runs `fn` while the audit log refuses every user_% event. */
  const refusingUserEvents = <T>(fn: () => Promise<T>) =>
    refusingAuditEvents(server.core.db, "user\\_%", fn);

  async function userRow(username: string) {
    const { rows } = await server.core.db.query<{
      id: string;
      is_active: boolean;
      password_hash: string;
    }>("SELECT id, is_active, password_hash FROM users WHERE username = $1", [username]);
    return rows[0];
  }

  async function login(username: string, pw: string): Promise<string> {
    const res = await callJson(server.url, "/auth/login", { username, password: pw });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.token as string;
  }

  const valid = async (token: string) =>
    (await callJson(server.url, "/auth/validate", undefined, { token, method: "GET" })).body.valid;

  /** No password, hash or email address in what the audit log keeps. */
  function expectNothingSecret(events: EventRow[], username: string): void {
    const stored = JSON.stringify(events.map((e) => e.details));
    for (const secret of [password, newPassword, "@example.test", "$argon2", username]) {
      expect(stored).not.toContain(secret);
    }
  }

  async function newUser(): Promise<{ id: string; username: string }> {
    const username = nextName();
    return { id: await server.createUser(username, password, ["viewer"]), username };
  }

  it("createUser commits the user with one user_create event by the system actor", async () => {
    const username = nextName();
    let id = "";
    const events = await eventsOf(async () => {
      id = (
        await server.core.identity.createUser(
          { username, email: `${username}@example.test`, password, roles: ["viewer"] },
          meta,
        )
      ).id;
    });
    expect(events).toEqual([
      {
        actor_type: "system",
        actor_id: null,
        action: "user_create",
        target: `user:${id}`,
        outcome: "success",
        request_id: "cli-test",
        details: { after: { roles: ["viewer"], is_active: true } },
      },
    ]);
    expectNothingSecret(events, username);
    expect(await verifyAuditChain(server.core.db)).toMatchObject({ ok: true });
  });

  it("setPassword commits with one user_set_password event and ends the user's sessions", async () => {
    const user = await newUser();
    const token = await login(user.username, password);
    const events = await eventsOf(async () => {
      expect(await server.core.identity.setPassword(user.username, newPassword, meta)).toBe(true);
    });
    expect(events).toEqual([
      {
        actor_type: "system",
        actor_id: null,
        action: "user_set_password",
        target: `user:${user.id}`,
        outcome: "success",
        request_id: "cli-test",
        details: { changed: ["password"], sessions_revoked: 1 },
      },
    ]);
    expectNothingSecret(events, user.username);
    expect(await valid(token)).toBe(false);
    await login(user.username, newPassword);
  });

  it("setPassword of an unknown user changes nothing and writes no event", async () => {
    const events = await eventsOf(async () => {
      expect(await server.core.identity.setPassword("op-nobody", newPassword, meta)).toBe(false);
    });
    expect(events).toEqual([]);
  });

  it("setActive commits with one user_update event, before and after", async () => {
    const user = await newUser();
    const token = await login(user.username, password);
    const off = await eventsOf(async () => {
      expect(await server.core.identity.setActive(user.id, false, meta)).toBe(true);
    });
    expect(off).toEqual([
      {
        actor_type: "system",
        actor_id: null,
        action: "user_update",
        target: `user:${user.id}`,
        outcome: "success",
        request_id: "cli-test",
        details: {
          changed: ["is_active"],
          before: { roles: ["viewer"], is_active: true },
          after: { roles: ["viewer"], is_active: false },
          sessions_revoked: 1,
        },
      },
    ]);
    expectNothingSecret(off, user.username);
    expect(await valid(token)).toBe(false);
    const on = await eventsOf(() => server.core.identity.setActive(user.id, true));
    expect(on).toMatchObject([
      {
        actor_type: "system",
        action: "user_update",
        request_id: null,
        details: { changed: ["is_active"], after: { is_active: true }, sessions_revoked: 0 },
      },
    ]);
    // Reactivation does not revive the sessions deactivation ended.
    expect(await valid(token)).toBe(false);
  });

  it("refuses odd usernames and short passwords, naming the field, without a user or event", async () => {
    const events = await eventsOf(async () => {
      await expect(
        server.core.identity.createUser({
          username: "no spaces",
          email: "",
          password: "long-enough-password",
          roles: [],
        }),
      ).rejects.toMatchObject({ reason: "INVALID_USERNAME", field: "username" });
      await expect(
        server.core.identity.createUser({
          username: "op-short",
          email: "",
          password: "short",
          roles: [],
        }),
      ).rejects.toMatchObject({ reason: "PASSWORD_TOO_SHORT", field: "password" });
    });
    expect(events).toEqual([]);
    expect(await userRow("op-short")).toBeUndefined();
  });

  describe("without their audit event", () => {
    it("creates no user", async () => {
      const username = nextName();
      await expect(
        refusingUserEvents(() =>
          server.core.identity.createUser({ username, email: "", password, roles: ["admin"] }),
        ),
      ).rejects.toMatchObject({ kind: "unavailable", reason: "AUDIT_UNAVAILABLE" });
      expect(await userRow(username)).toBeUndefined();
    });

    it("sets no password and ends no session", async () => {
      const user = await newUser();
      const token = await login(user.username, password);
      const hash = (await userRow(user.username))?.password_hash;
      await expect(
        refusingUserEvents(() => server.core.identity.setPassword(user.username, newPassword)),
      ).rejects.toMatchObject({ kind: "unavailable", reason: "AUDIT_UNAVAILABLE" });
      expect((await userRow(user.username))?.password_hash).toBe(hash);
      expect(await valid(token)).toBe(true);
      await login(user.username, password);
    });

    it("deactivates no user and ends no session", async () => {
      const user = await newUser();
      const token = await login(user.username, password);
      await expect(
        refusingUserEvents(() => server.core.identity.setActive(user.id, false)),
      ).rejects.toMatchObject({ kind: "unavailable", reason: "AUDIT_UNAVAILABLE" });
      expect((await userRow(user.username))?.is_active).toBe(true);
      expect(await valid(token)).toBe(true);
    });
  });
});
