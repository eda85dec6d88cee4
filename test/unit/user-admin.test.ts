import { describe, expect, it } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import {
  checkPasswordPolicy,
  commonPasswords,
  maxPasswordLength,
  minPasswordLength,
  passwordProblem,
} from "../../src/identity/password-policy.js";
import { createUserAdmin } from "../../src/identity/user-admin.js";
import type {
  NewUser,
  UserAdminStore,
  UserChanges,
  UserRecord,
  UserStore,
} from "../../src/identity/user-store.js";

describe("password policy (NIST 800-63B)", () => {
  it("refuses fewer than 12 characters, counting code points", () => {
    expect(passwordProblem("")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("k7#vQ2!mZp9")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("k7#vQ2!mZp9x")).toBeUndefined();
    // Eleven emoji are 22 UTF-16 units but 11 characters.
    expect(passwordProblem("🦊🐙🦉🐢🦀🐝🦋🐌🦎🐬🦔")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("🦊🐙🦉🐢🦀🐝🦋🐌🦎🐬🦔🐧")).toBeUndefined();
  });

  it("refuses more than 1024 characters", () => {
    const long = "tangerine-orbit-".repeat(70);
    expect(passwordProblem(long.slice(0, maxPasswordLength))).toBeUndefined();
    expect(passwordProblem(long.slice(0, maxPasswordLength + 1))).toBe("PASSWORD_TOO_LONG");
  });

  it("has no composition rules: lower-case letters and spaces alone pass", () => {
    expect(passwordProblem("walnut lantern drizzle")).toBeUndefined();
    expect(passwordProblem("walnutlanterndrizzle")).toBeUndefined();
  });

  it("refuses common passwords in any letter case", () => {
    for (const p of ["password1234", "Password1234", "PASSWORD1234", "Qwerty123456"]) {
      expect(passwordProblem(p), p).toBe("PASSWORD_TOO_COMMON");
    }
    expect(passwordProblem("iloveyouforever")).toBe("PASSWORD_TOO_COMMON");
    expect(passwordProblem("Summer2025!")).toBe("PASSWORD_TOO_SHORT");
    expect(passwordProblem("Traitgate2025!")).toBe("PASSWORD_TOO_COMMON");
  });

  it("refuses repeated and sequential characters", () => {
    for (const p of [
      "aaaaaaaaaaaa",
      "abababababab",
      "123123123123",
      "passpasspass",
      "123456789012",
      "0987654321098",
      "abcdefghijklmn",
      "qwertyuiopasdf",
      "ZYXWVUTSRQPO",
    ]) {
      expect(passwordProblem(p), p).toBe("PASSWORD_TOO_COMMON");
    }
  });

  it("refuses the username as the password, in any letter case", () => {
    expect(passwordProblem("margaret.hamilton", "Margaret.Hamilton")).toBe("PASSWORD_TOO_COMMON");
    expect(passwordProblem("margaret.hamilton", "grace.hopper")).toBeUndefined();
  });

  it("ships a few hundred entries, each long enough to matter, lower case", () => {
    expect(commonPasswords.size).toBeGreaterThanOrEqual(200);
    expect(commonPasswords.size).toBeLessThanOrEqual(1000);
    for (const p of commonPasswords) {
      expect([...p].length, p).toBeGreaterThanOrEqual(minPasswordLength);
      expect(p, p).toBe(p.toLowerCase());
    }
  });

  it("throws invalid_argument naming the field password", () => {
    const err = catchError(() => checkPasswordPolicy("short"));
    expect(err).toMatchObject({
      kind: "invalid_argument",
      reason: "PASSWORD_TOO_SHORT",
      field: "password",
    });
    expect(catchError(() => checkPasswordPolicy("password1234"))).toMatchObject({
      reason: "PASSWORD_TOO_COMMON",
      field: "password",
    });
    expect(() => checkPasswordPolicy("walnut lantern drizzle")).not.toThrow();
  });
});

function catchError(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error("expected a DomainError");
}

async function rejection(promise: Promise<unknown>): Promise<DomainError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error("expected a DomainError");
}

/** Users in memory with the store's semantics (keyset on lower(username)). */
function memoryUsers() {
  const rows = new Map<string, UserRecord & { passwordHash: string }>();
  const strip = ({ passwordHash: _h, ...u }: UserRecord & { passwordHash: string }) => ({
    ...u,
    roles: [...u.roles],
  });
  const store: Pick<UserStore, "create" | "setPasswordHash"> & UserAdminStore = {
    async create(u: NewUser) {
      if ([...rows.values()].some((r) => r.username.toLowerCase() === u.username.toLowerCase())) {
        throw new DomainError("already_exists", "USERNAME_TAKEN", "taken", { field: "username" });
      }
      const now = new Date();
      const row = {
        id: crypto.randomUUID(),
        username: u.username,
        email: u.email,
        passwordHash: u.passwordHash,
        roles: [...u.roles],
        isActive: u.isActive ?? true,
        mfaEnabled: false,
        createdAt: now,
        updatedAt: now,
      };
      rows.set(row.id, row);
      return { ...strip(row), passwordHash: row.passwordHash };
    },
    async setPasswordHash(id: string, hash: string) {
      const row = rows.get(id);
      if (row) row.passwordHash = hash;
      return row !== undefined;
    },
    async getRecord(id: string) {
      const row = rows.get(id);
      return row && strip(row);
    },
    async list(q) {
      const all = [...rows.values()]
        .filter((r) => q.after === undefined || r.username.toLowerCase() > q.after)
        .filter((r) => q.role === undefined || r.roles.includes(q.role))
        .filter((r) => q.isActive === undefined || r.isActive === q.isActive)
        .filter(
          (r) =>
            q.usernamePrefix === undefined ||
            r.username.toLowerCase().startsWith(q.usernamePrefix.toLowerCase()),
        )
        .sort((a, b) => (a.username.toLowerCase() < b.username.toLowerCase() ? -1 : 1));
      const page = all.slice(0, q.limit);
      return {
        users: page.map(strip),
        nextAfter: all.length > q.limit ? page.at(-1)?.username.toLowerCase() : undefined,
      };
    },
    async update(id: string, changes: UserChanges) {
      const row = rows.get(id);
      if (!row) return undefined;
      const before = strip(row);
      if (changes.email !== undefined) row.email = changes.email;
      if (changes.roles !== undefined) row.roles = [...changes.roles];
      if (changes.isActive !== undefined) row.isActive = changes.isActive;
      return { before, after: strip(row) };
    },
    async delete(id: string) {
      const row = rows.get(id);
      rows.delete(id);
      return row && strip(row);
    },
  };
  return { store, rows };
}

function setup() {
  const { store, rows } = memoryUsers();
  const events: AuditEventInput[] = [];
  const forgotten: string[] = [];
  const revoked: string[] = [];
  const admin = createUserAdmin({
    users: store,
    passwords: { hash: async (p) => `hashed:${p}` },
    audit: {
      async write(event) {
        events.push(event);
        return { id: crypto.randomUUID(), seq: String(events.length), hash: "h" };
      },
    },
    forget: (id) => forgotten.push(id),
    revokeSessions: async (id) => {
      revoked.push(id);
      return 1;
    },
    resetMfa: async () => true,
  });
  return { admin, store, rows, events, forgotten, revoked };
}

const meta = { requestId: "req-1" };
const strong = "walnut lantern drizzle";

async function withAdmin() {
  const s = setup();
  const root = await s.store.create({
    username: "root",
    email: "",
    passwordHash: "x",
    roles: ["admin"],
  });
  return { ...s, actor: { userId: root.id } };
}

describe("user administration (domain)", () => {
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
    const { admin, actor, rows, events } = await withAdmin();
    const user = await admin.createUser(actor, meta, {
      username: "alice",
      email: "alice@example.test",
      password: strong,
      roles: ["viewer"],
    });
    expect(user).toMatchObject({ username: "alice", roles: ["viewer"], isActive: true });
    expect(user).not.toHaveProperty("passwordHash");
    expect(rows.get(user.id)?.passwordHash).toBe(`hashed:${strong}`);
    expect(events).toEqual([
      {
        actorType: "user",
        actorId: actor.userId,
        action: "user_create",
        target: `user:${user.id}`,
        outcome: "success",
        requestId: "req-1",
        details: { after: { roles: ["viewer"], is_active: true } },
      },
    ]);
    expect(JSON.stringify(events)).not.toContain(strong);
  });

  it("refuses a weak password before creating anything", async () => {
    const { admin, actor, rows, events } = await withAdmin();
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
    expect(rows.size).toBe(1);
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
    for (const attempt of [
      admin.updateUser(actor, meta, { userId: actor.userId, isActive: false }),
      admin.updateUser(actor, meta, { userId: actor.userId, roles: ["viewer"] }),
      admin.deleteUser(actor, meta, { userId: actor.userId }),
    ]) {
      expect(await rejection(attempt)).toMatchObject({
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
      admin.getUser(actor, meta, { userId }),
      admin.updateUser(actor, meta, { userId, isActive: false }),
      admin.setUserPassword(actor, meta, { userId, password: strong }),
      admin.deleteUser(actor, meta, { userId }),
    ]) {
      expect(await rejection(attempt)).toMatchObject({
        kind: "not_found",
        reason: "USER_NOT_FOUND",
      });
    }
    expect(events).toEqual([]);
  });

  it("sets a password under the policy and audits it without the password", async () => {
    const { admin, actor, rows, events } = await withAdmin();
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
    expect(rows.get(u.id)?.passwordHash).toBe("hashed:copper kettle dawn");
    expect(events.at(-1)).toMatchObject({
      action: "user_set_password",
      target: `user:${u.id}`,
      details: { changed: ["password"] },
    });
    expect(JSON.stringify(events)).not.toContain("copper kettle dawn");
  });

  it("deletes, audits what was deleted and forgets the cached user", async () => {
    const { admin, actor, rows, events, forgotten } = await withAdmin();
    const u = await admin.createUser(actor, meta, {
      username: "erin",
      email: "",
      password: strong,
      roles: ["viewer"],
    });
    await admin.deleteUser(actor, meta, { userId: u.id });
    expect(rows.has(u.id)).toBe(false);
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

  it("lets an audit failure fail the call (fail closed)", async () => {
    const { store } = memoryUsers();
    const root = await store.create({ username: "root", email: "", passwordHash: "x", roles: [] });
    const admin = createUserAdmin({
      users: store,
      passwords: { hash: async (p) => p },
      audit: {
        write: () =>
          Promise.reject(new DomainError("unavailable", "AUDIT_UNAVAILABLE", "audit down")),
      },
      forget: () => undefined,
      revokeSessions: async () => 0,
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
  });
});
