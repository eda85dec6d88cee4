import { beforeEach, describe, expect, it } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import { createSessionRevoker, createSessionStore } from "../../src/identity/session-store.js";
import { createUserAdmin } from "../../src/identity/user-admin.js";
import { createUserStore } from "../../src/identity/user-store.js";
import { databaseTargets, useAuditedDatabase } from "../support/database.js";
import { rejection } from "../support/errors.js";

/**
 * User administration's domain on a real database (PGlite, and PostgreSQL with
 * TEST_DATABASE_URL): each change commits in one transaction with its audit event. The
 * password policy's own tests are in test/unit/user-admin.test.ts; the API's in
 * test/integration/user-admin.test.ts.
 */

const meta = {
  requestId: "req-1",
  origin: { clientAddress: "203.0.113.7", userAgent: "admin-script/1.0" },
};
const strong = "walnut lantern drizzle";

describe.each(databaseTargets())("user administration (domain) on $name", (target) => {
  const opened = useAuditedDatabase(target);
  // Each case starts without users (their sessions and MFA codes go with them).
  beforeEach(async () => {
    await opened.db.query("DELETE FROM users");
  });

  function setup() {
    const events: AuditEventInput[] = [];
    const forgotten: string[] = [];
    const revoked: string[] = [];
    const admin = createUserAdmin({
      db: opened.db,
      passwords: { hash: async (p) => `hashed:${p}` },
      audit: {
        async writeIn(tx, event) {
          const appended = await opened.writer.writeIn(tx, event);
          events.push(event);
          return appended;
        },
      },
      forget: (id) => forgotten.push(id),
      revokeSessions: async (tx, id, reason) => {
        revoked.push(id);
        return createSessionRevoker(tx).revokeAll(id, reason);
      },
      resetMfa: async () => true,
    });
    return { admin, events, forgotten, revoked };
  }

  async function withAdmin() {
    const s = setup();
    const root = await createUserStore(opened.db).create({
      username: "root",
      email: "",
      passwordHash: "x",
      roles: ["admin"],
    });
    return { ...s, actor: { userId: root.id } };
  }

  async function passwordHashOf(id: string): Promise<string | undefined> {
    return (await createUserStore(opened.db).findById(id))?.passwordHash;
  }

  async function userCount(): Promise<number> {
    return createUserStore(opened.db).count();
  }

  it("revokes a user's sessions when deactivating them or setting their password, not on reactivation", async () => {
    const { admin, actor, revoked } = await withAdmin();
    const u = await admin.createUser(actor, meta, {
      username: "dana",
      email: "",
      password: strong,
      roles: ["viewer"],
    });
    await admin.updateUser(actor, meta, { userId: u.id, isActive: false });
    expect(revoked).toEqual([u.id]);
    await admin.updateUser(actor, meta, { userId: u.id, isActive: true });
    expect(revoked).toEqual([u.id]);
    await admin.setUserPassword(actor, meta, { userId: u.id, password: "another walnut lantern" });
    expect(revoked).toEqual([u.id, u.id]);
  });

  it("creates a user, hashes the password and audits the creation without it", async () => {
    const { admin, actor, events } = await withAdmin();
    const user = await admin.createUser(actor, meta, {
      username: "alice",
      email: "alice@example.test",
      password: strong,
      roles: ["viewer"],
    });
    expect(user).toMatchObject({ username: "alice", roles: ["viewer"], isActive: true });
    expect(user).not.toHaveProperty("passwordHash");
    expect(await passwordHashOf(user.id)).toBe(`hashed:${strong}`);
    expect(events).toEqual([
      {
        actorType: "user",
        actorId: actor.userId,
        action: "user_create",
        target: `user:${user.id}`,
        outcome: "success",
        requestId: "req-1",
        origin: { clientAddress: "203.0.113.7", userAgent: "admin-script/1.0" },
        details: { after: { roles: ["viewer"], is_active: true } },
      },
    ]);
    expect(JSON.stringify(events)).not.toContain(strong);
  });

  it("refuses a weak password before creating anything", async () => {
    const { admin, actor, events } = await withAdmin();
    const err = await rejection(
      admin.createUser(actor, meta, {
        username: "bob",
        email: "",
        password: "bob",
        roles: [],
      }),
    );
    expect(err).toMatchObject({ reason: "PASSWORD_TOO_SHORT", field: "password" });
    const same = await rejection(
      admin.createUser(actor, meta, {
        username: "Bob.Loblaw.Law",
        email: "",
        password: "bob.loblaw.law",
        roles: [],
      }),
    );
    expect(same.reason).toBe("PASSWORD_TOO_COMMON");
    expect(await userCount()).toBe(1);
    expect(events).toEqual([]);
  });

  it("updates, records before and after, and forgets the cached user", async () => {
    const { admin, actor, events, forgotten } = await withAdmin();
    const u = await admin.createUser(actor, meta, {
      username: "carol",
      email: "carol@example.test",
      password: strong,
      roles: ["viewer"],
    });
    const after = await admin.updateUser(actor, meta, {
      userId: u.id,
      email: "c@example.test",
      roles: ["clinician", "viewer"],
      isActive: false,
    });
    expect(after).toMatchObject({ email: "c@example.test", roles: ["clinician", "viewer"] });
    expect(after.isActive).toBe(false);
    expect(forgotten).toEqual([u.id]);
    expect(events.at(-1)).toMatchObject({
      action: "user_update",
      target: `user:${u.id}`,
      outcome: "success",
      details: {
        changed: ["email", "roles", "is_active"],
        before: { roles: ["viewer"], is_active: true },
        after: { roles: ["clinician", "viewer"], is_active: false },
      },
    });
    expect(JSON.stringify(events)).not.toContain("example.test");
  });

  it("refuses self-lockout: deactivating, demoting or deleting oneself", async () => {
    const { admin, actor, events } = await withAdmin();
    // One at a time: each call goes to the database.
    for (const attempt of [
      () => admin.updateUser(actor, meta, { userId: actor.userId, isActive: false }),
      () => admin.updateUser(actor, meta, { userId: actor.userId, roles: ["viewer"] }),
      () => admin.deleteUser(actor, meta, { userId: actor.userId }),
    ]) {
      expect(await rejection(attempt())).toMatchObject({
        kind: "failed_precondition",
        reason: "SELF_LOCKOUT",
      });
    }
    expect(events).toEqual([]);
    // Changing one's own email, or keeping admin among one's roles, is fine.
    const me = await admin.updateUser(actor, meta, {
      userId: actor.userId,
      roles: ["admin", "auditor"],
    });
    expect(me.roles).toEqual(["admin", "auditor"]);
  });

  it("answers not_found for unknown users on every call", async () => {
    const { admin, actor, events } = await withAdmin();
    const userId = crypto.randomUUID();
    for (const attempt of [
      () => admin.getUser(actor, meta, { userId }),
      () => admin.updateUser(actor, meta, { userId, isActive: false }),
      () => admin.setUserPassword(actor, meta, { userId, password: strong }),
      () => admin.deleteUser(actor, meta, { userId }),
      () => admin.resetUserMfa(actor, meta, { userId }),
    ]) {
      expect(await rejection(attempt())).toMatchObject({
        kind: "not_found",
        reason: "USER_NOT_FOUND",
      });
    }
    expect(events).toEqual([]);
  });

  it("sets a password under the policy and audits it without the password", async () => {
    const { admin, actor, events } = await withAdmin();
    const u = await admin.createUser(actor, meta, {
      username: "dave",
      email: "",
      password: strong,
      roles: [],
    });
    expect(
      (await rejection(admin.setUserPassword(actor, meta, { userId: u.id, password: "DAVE" })))
        .reason,
    ).toBe("PASSWORD_TOO_SHORT");
    await admin.setUserPassword(actor, meta, { userId: u.id, password: "copper kettle dawn" });
    expect(await passwordHashOf(u.id)).toBe("hashed:copper kettle dawn");
    expect(events.at(-1)).toMatchObject({
      action: "user_set_password",
      target: `user:${u.id}`,
      details: { changed: ["password"] },
    });
    expect(JSON.stringify(events)).not.toContain("copper kettle dawn");
  });

  it("deletes, audits what was deleted and forgets the cached user", async () => {
    const { admin, actor, events, forgotten } = await withAdmin();
    const u = await admin.createUser(actor, meta, {
      username: "erin",
      email: "",
      password: strong,
      roles: ["viewer"],
    });
    await admin.deleteUser(actor, meta, { userId: u.id });
    expect(await passwordHashOf(u.id)).toBeUndefined();
    expect(forgotten).toEqual([u.id]);
    expect(events.at(-1)).toMatchObject({
      action: "user_delete",
      target: `user:${u.id}`,
      details: { before: { roles: ["viewer"], is_active: true } },
    });
  });

  it("pages with opaque tokens bound to the filters", async () => {
    const { admin, actor } = await withAdmin();
    for (const name of ["Kim", "lee", "Max", "ned", "Oda"]) {
      await admin.createUser(actor, meta, {
        username: name,
        email: "",
        password: strong,
        roles: ["viewer"],
      });
    }
    const first = await admin.listUsers(actor, meta, { pageSize: 2, role: "viewer" });
    expect(first.users.map((u) => u.username)).toEqual(["Kim", "lee"]);
    expect(first.nextPageToken).not.toContain("lee");
    const second = await admin.listUsers(actor, meta, {
      pageSize: 2,
      role: "viewer",
      pageToken: first.nextPageToken,
    });
    expect(second.users.map((u) => u.username)).toEqual(["Max", "ned"]);
    const third = await admin.listUsers(actor, meta, {
      pageSize: 2,
      role: "viewer",
      pageToken: second.nextPageToken,
    });
    expect(third.users.map((u) => u.username)).toEqual(["Oda"]);
    expect(third.nextPageToken).toBe("");
    const otherFilter = admin.listUsers(actor, meta, {
      pageSize: 2,
      pageToken: first.nextPageToken,
    });
    expect(await rejection(otherFilter)).toMatchObject({
      reason: "INVALID_PAGE_TOKEN",
      field: "page_token",
    });
    const garbage = admin.listUsers(actor, meta, { pageToken: "not-a-token" });
    expect((await rejection(garbage)).reason).toBe("INVALID_PAGE_TOKEN");
  });

  it("lets an audit failure fail the call and apply nothing (fail closed)", async () => {
    const root = await createUserStore(opened.db).create({
      username: "root",
      email: "",
      passwordHash: "x",
      roles: [],
    });
    const admin = createUserAdmin({
      db: opened.db,
      passwords: { hash: async (p) => p },
      audit: {
        writeIn: () =>
          Promise.reject(new DomainError("unavailable", "AUDIT_UNAVAILABLE", "audit down")),
      },
      forget: () => undefined,
      revokeSessions: async () => [],
      resetMfa: async () => false,
    });
    const err = await rejection(
      admin.createUser({ userId: root.id }, meta, {
        username: "frank",
        email: "",
        password: strong,
        roles: [],
      }),
    );
    expect(err.reason).toBe("AUDIT_UNAVAILABLE");
    expect(await userCount()).toBe(1);
  });

  it("rolls a deactivation back with its session revocations, and forgets nothing, when the event cannot be written", async () => {
    const { admin, actor } = await withAdmin();
    const u = await admin.createUser(actor, meta, {
      username: "gwen",
      email: "",
      password: strong,
      roles: ["viewer"],
    });
    const sessions = createSessionStore(opened.db, { maxLifetimeSeconds: 43_200 });
    const session = await sessions.create(u.id, 3600);
    const forgotten: string[] = [];
    const failing = createUserAdmin({
      db: opened.db,
      passwords: { hash: async (p) => p },
      audit: {
        writeIn: () =>
          Promise.reject(new DomainError("unavailable", "AUDIT_UNAVAILABLE", "audit down")),
      },
      forget: (id, sessionIds) => forgotten.push(id, ...sessionIds),
      revokeSessions: (tx, id, reason) => createSessionRevoker(tx).revokeAll(id, reason),
      resetMfa: async () => false,
    });
    const err = await rejection(failing.updateUser(actor, meta, { userId: u.id, isActive: false }));
    expect(err.reason).toBe("AUDIT_UNAVAILABLE");
    expect((await createUserStore(opened.db).findById(u.id))?.isActive).toBe(true);
    expect((await sessions.find(session.sessionId))?.revoked).toBe(false);
    expect(forgotten).toEqual([]);
    // With the event written, the same change applies and names the revoked session.
    const ok = createUserAdmin({
      db: opened.db,
      passwords: { hash: async (p) => p },
      audit: opened.writer,
      forget: (id, sessionIds) => forgotten.push(id, ...sessionIds),
      revokeSessions: (tx, id, reason) => createSessionRevoker(tx).revokeAll(id, reason),
      resetMfa: async () => false,
    });
    await ok.updateUser(actor, meta, { userId: u.id, isActive: false });
    expect((await sessions.find(session.sessionId))?.revoked).toBe(true);
    expect(forgotten).toEqual([u.id, session.sessionId]);
  });
});
