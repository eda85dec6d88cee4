import { describe, expect, it, vi } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import { createIdentity } from "../../src/identity/identity.js";
import type { PasswordHasher } from "../../src/identity/passwords.js";
import type { SessionStore } from "../../src/identity/session-store.js";
import { createLoginThrottle } from "../../src/identity/throttle.js";
import { createTokenService } from "../../src/identity/tokens.js";
import type { User, UserStore } from "../../src/identity/user-store.js";
import { silentLogger } from "../../src/log.js";

const jwt = {
  algorithm: "HS256" as const,
  secret: "k3Jd9s0Qm1Zx8Vb7Nc6Lp5Ow4Ie3Ru2Ty1",
  previousSecrets: [],
  privateKeyPem: undefined,
  issuer: "traitgate",
  audience: "traitgate",
  ttlSeconds: 900,
  refreshTtlSeconds: 3600,
  sessionMaxLifetimeSeconds: 43_200,
  serviceTtlSeconds: 600,
};

const meta = { clientAddress: "127.0.0.1", requestId: "r1" };

/** Audit events in memory; `failing` makes every write reject, as a down database would. */
function memoryAudit() {
  const a = {
    events: [] as AuditEventInput[],
    failing: false,
    async write(event: AuditEventInput) {
      if (a.failing)
        throw new DomainError("unavailable", "AUDIT_UNAVAILABLE", "audit log unavailable");
      a.events.push(event);
      return { id: crypto.randomUUID(), seq: String(a.events.length), hash: "h" };
    },
  };
  return a;
}

/** Sessions in memory, with the store's rotation and reuse semantics. */
function memorySessions(): SessionStore {
  const sessions = new Map<string, { userId: string; revoked: boolean }>();
  const tokens = new Map<string, { sessionId: string; used: boolean }>();
  const mint = (sessionId: string) => {
    const token = `rt_${crypto.randomUUID()}`;
    tokens.set(token, { sessionId, used: false });
    return token;
  };
  return {
    async create(userId, ttl) {
      const sessionId = crypto.randomUUID();
      sessions.set(sessionId, { userId, revoked: false });
      return {
        sessionId,
        refreshToken: mint(sessionId),
        refreshExpiresIn: ttl,
        sessionExpiresIn: 43_200,
      };
    },
    async refresh(token, ttl) {
      const t = tokens.get(token);
      const s = t && sessions.get(t.sessionId);
      if (!t || !s) return { kind: "unknown" };
      if (s.revoked) return { kind: "revoked" };
      if (t.used) {
        s.revoked = true;
        return { kind: "reused", sessionId: t.sessionId, userId: s.userId };
      }
      t.used = true;
      return {
        kind: "rotated",
        sessionId: t.sessionId,
        userId: s.userId,
        refreshToken: mint(t.sessionId),
        refreshExpiresIn: ttl,
        sessionExpiresIn: 43_200,
      };
    },
    async find(id) {
      const s = sessions.get(id);
      return s && { id, userId: s.userId, revoked: s.revoked };
    },
    async revoke(id) {
      const s = sessions.get(id);
      if (!s || s.revoked) return false;
      s.revoked = true;
      return true;
    },
    async revokeAll(userId) {
      const ids = [...sessions]
        .filter(([, s]) => s.userId === userId && !s.revoked)
        .map(([id]) => id);
      for (const id of ids) {
        const s = sessions.get(id);
        if (s) s.revoked = true;
      }
      return ids;
    },
  };
}

/**
 * Users in memory, stored directly (with the fake hasher's `hashed:<password>`): creating and
 * changing users is the operator's, tested on a database in test/integration/user-management.test.ts.
 */
function memoryStore(): UserStore & { reads: number } {
  const users = new Map<string, User>();
  const store = {
    reads: 0,
    async findByUsername(username: string) {
      return [...users.values()].find((u) => u.username.toLowerCase() === username.toLowerCase());
    },
    async findById(id: string) {
      store.reads++;
      return users.get(id);
    },
    async create(u: Parameters<UserStore["create"]>[0]) {
      const user: User = {
        id: crypto.randomUUID(),
        mfaEnabled: false,
        isActive: true,
        ...u,
        roles: [...u.roles],
      };
      users.set(user.id, user);
      return user;
    },
    async setActive(id: string, isActive: boolean) {
      const u = users.get(id);
      if (u) u.isActive = isActive;
      return u !== undefined;
    },
    async setPasswordHash(id: string, passwordHash: string) {
      const u = users.get(id);
      if (u) u.passwordHash = passwordHash;
      return u !== undefined;
    },
    async count() {
      return users.size;
    },
  };
  return store;
}

function fakeHasher(): PasswordHasher & { dummyCalls: number } {
  const h = {
    dummyCalls: 0,
    hash: async (p: string) => `hashed:${p}`,
    verify: async (hash: string, p: string) => hash === `hashed:${p}`,
    verifyDummy: async () => {
      h.dummyCalls++;
    },
  };
  return h;
}

async function setup(
  now = () => Date.now(),
  live = { mfaRequired: () => false, tokenTtlSeconds: () => 900 },
) {
  const users = memoryStore();
  const passwords = fakeHasher();
  const tokens = await createTokenService(jwt, { now });
  const clock = { now };
  const throttle = createLoginThrottle(clock);
  const sessions = memorySessions();
  const audit = memoryAudit();
  const identity = createIdentity({
    users,
    serviceAccounts: { findById: async () => undefined },
    passwords,
    tokens,
    clock,
    log: silentLogger,
    throttle,
    sessions,
    audit,
    // MFA has its own tests (test/integration/mfa.test.ts); these users have it off.
    mfa: {
      check: async () => false,
      enroll: async () => ({ secret: "", otpauthUri: "" }),
      activate: async () => ({ recoveryCodes: [] }),
      disable: async () => undefined,
      reset: async () => false,
    },
    // One transaction in the module (src/identity/module.ts; test/integration/change-password);
    // here the stores in memory.
    commitPasswordChange: async ({ userId, passwordHash, keepSessionId, eventFor }) => {
      await users.setPasswordHash(userId, passwordHash);
      const revoked = await sessions.revokeAll(userId, "password_change", keepSessionId);
      await audit.write(eventFor(revoked.length));
      return revoked;
    },
    refreshTtlSeconds: 3600,
    live,
  });
  return { identity, users, passwords, sessions, audit };
}

describe("identity domain", () => {
  it("reads auth.mfa_required and auth.token_ttl_seconds at each login, without a restart", async () => {
    let mfaRequired = false;
    let ttl = 900;
    const { identity, users } = await setup(undefined, {
      mfaRequired: () => mfaRequired,
      tokenTtlSeconds: () => ttl,
    });
    await users.create({
      username: "liv",
      email: "",
      passwordHash: "hashed:livs-long-password",
      roles: [],
    });
    const first = await identity.login("liv", "livs-long-password", meta);
    expect([first.expiresIn, first.refreshToken === ""]).toEqual([900, false]);
    mfaRequired = true;
    ttl = 300;
    const second = await identity.login("liv", "livs-long-password", meta);
    expect([second.expiresIn, second.refreshToken]).toEqual([300, ""]);
    expect(await identity.validate(`Bearer ${second.token}`)).toEqual({
      valid: false,
      reason: "mfa_enrollment_required",
    });
  });

  it("hashes a dummy password for unknown users, so timing does not reveal them", async () => {
    const { identity, passwords } = await setup();
    await expect(identity.login("ghost", "some-password", meta)).rejects.toMatchObject({
      kind: "unauthenticated",
      reason: "INVALID_CREDENTIALS",
    });
    expect(passwords.dummyCalls).toBe(1);
  });

  it("checks the password of an inactive user before refusing, with the same error", async () => {
    const { identity, users } = await setup();
    const u = await users.create({
      username: "ivy",
      email: "",
      passwordHash: "hashed:ivys-long-password",
      roles: [],
    });
    await users.setActive(u.id, false);
    const err = await identity.login("ivy", "ivys-long-password", meta).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err).toMatchObject({
      reason: "INVALID_CREDENTIALS",
      message: "invalid username or password",
    });
  });

  it("reads the user's current roles and state on validate, remembering them briefly", async () => {
    let now = Date.UTC(2026, 0, 1);
    const { identity, users } = await setup(() => now);
    await users.create({
      username: "joe",
      email: "",
      passwordHash: "hashed:jos-long-password",
      roles: ["viewer"],
    });
    const { token } = await identity.login("joe", "jos-long-password", meta);
    const auth = `Bearer ${token}`;
    expect(await identity.validate(auth)).toMatchObject({ valid: true, roles: ["viewer"] });
    const reads = users.reads;
    await identity.validate(auth);
    expect(users.reads).toBe(reads);
    now += 1500;
    await identity.validate(auth);
    expect(users.reads).toBe(reads + 1);
  });

  it("coalesces concurrent reads of one user", async () => {
    const { identity, users } = await setup();
    await users.create({
      username: "kim",
      email: "",
      passwordHash: "hashed:kims-long-password",
      roles: [],
    });
    const { token } = await identity.login("kim", "kims-long-password", meta);
    const spy = vi.spyOn(users, "findById");
    await Promise.all(Array.from({ length: 20 }, () => identity.validate(`Bearer ${token}`)));
    expect(spy).toHaveBeenCalledTimes(1);
  });

  it("authenticate throws unauthenticated with the reason in upper case", async () => {
    const { identity } = await setup();
    await expect(identity.authenticate(null)).rejects.toMatchObject({
      kind: "unauthenticated",
      reason: "MISSING",
    });
    await expect(identity.authenticate("Bearer x.y.z")).rejects.toMatchObject({
      reason: "MALFORMED",
    });
  });

  it("refuses with TOO_MANY_ATTEMPTS and a retry time once an address keeps failing, and records failures of unknown users too", async () => {
    const { identity } = await setup();
    for (let i = 0; i < 3; i++) {
      await expect(
        identity.login("ghost", "wrong-password", { clientAddress: "10.9.9.9", requestId: "r2" }),
      ).rejects.toMatchObject({
        reason: "INVALID_CREDENTIALS",
      });
    }
    const err = await identity
      .login("ghost", "wrong-password", { clientAddress: "10.9.9.9", requestId: "r2" })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "resource_exhausted", reason: "TOO_MANY_ATTEMPTS" });
    expect((err as DomainError).retryAfterSeconds).toBeGreaterThan(0);
  });

  it("records logins in the audit log with the true cause, and the request id", async () => {
    const { identity, users, audit } = await setup();
    await users.create({
      username: "lee",
      email: "",
      passwordHash: "hashed:lees-long-password",
      roles: [],
    });
    await identity.login("lee", "lees-long-password", meta);
    await identity.login("lee", "wrong-password!", meta).catch(() => undefined);
    await identity.login("nobody", "wrong-password!", meta).catch(() => undefined);
    expect(audit.events.map((e) => [e.action, e.outcome, e.details?.cause])).toEqual([
      ["login", "success", undefined],
      ["login", "failure", "wrong_password"],
      ["login", "failure", "unknown_user"],
    ]);
    expect(audit.events.every((e) => e.requestId === "r1")).toBe(true);
    expect(JSON.stringify(audit.events)).not.toContain("lees-long-password");
  });

  it("fails closed: no token when the audit log cannot be written", async () => {
    const { identity, users, audit } = await setup();
    await users.create({
      username: "max",
      email: "",
      passwordHash: "hashed:maxs-long-password",
      roles: [],
    });
    audit.failing = true;
    await expect(identity.login("max", "maxs-long-password", meta)).rejects.toMatchObject({
      kind: "unavailable",
    });
  });

  it("audits refresh token reuse, logout and logout-all", async () => {
    const { identity, users, audit } = await setup();
    await users.create({
      username: "ned",
      email: "",
      passwordHash: "hashed:neds-long-password",
      roles: [],
    });
    const first = await identity.login("ned", "neds-long-password", meta);
    await identity.refresh(first.refreshToken, meta);
    await expect(identity.refresh(first.refreshToken, meta)).rejects.toMatchObject({
      reason: "REFRESH_TOKEN_REUSED",
    });
    const again = await identity.login("ned", "neds-long-password", meta);
    const caller = await identity.authenticate(`Bearer ${again.token}`);
    await identity.logout(caller, meta);
    await identity.logoutAll(caller, meta);
    expect(audit.events.map((e) => `${e.action}:${e.outcome}`)).toEqual([
      "login:success",
      "refresh:denied",
      "login:success",
      "logout:success",
      "logout_all:success",
    ]);
  });

  it("re-checks MFA_REQUIRED on refresh: a user without MFA is refused, the session ended and audited", async () => {
    let mfaRequired = false;
    const { identity, users, audit } = await setup(undefined, {
      mfaRequired: () => mfaRequired,
      tokenTtlSeconds: () => 900,
    });
    await users.create({
      username: "una",
      email: "",
      passwordHash: "hashed:unas-long-password",
      roles: ["admin"],
    });
    const held = await identity.login("una", "unas-long-password", meta);
    mfaRequired = true;
    await expect(identity.refresh(held.refreshToken, meta)).rejects.toMatchObject({
      kind: "unauthenticated",
      reason: "MFA_ENROLLMENT_REQUIRED",
    });
    expect(await identity.validate(`Bearer ${held.token}`)).toMatchObject({ reason: "revoked" });
    expect(audit.events.at(-1)).toMatchObject({
      action: "refresh",
      outcome: "denied",
      details: { cause: "mfa_enrollment_required", session_revoked: true },
    });
  });
});
