import type { AuditEventInput, AuditWriter, RequestOrigin } from "../audit/index.js";
import { type DomainError, invalidArgument, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { Queryable } from "../storage/index.js";
import type { Mfa } from "./mfa.js";
import { checkPasswordPolicy } from "./password-policy.js";
import { normalizePassword, type PasswordHasher } from "./passwords.js";
import { createRefresh } from "./refresh.js";
import type { ServiceAccountStore } from "./service-account-store.js";
import {
  createSessionRevoker,
  type IssuedRefreshToken,
  type SessionState,
  type SessionStore,
} from "./session-store.js";
import { createStateCache } from "./state-cache.js";
import { type LoginThrottle, type ThrottleDecision, tooManyAttempts } from "./throttle.js";
import type { Clock, PublicJwk, TokenService } from "./tokens.js";
import type { UserStore } from "./user-store.js";
import {
  createTokenValidation,
  mfaEnrollScope,
  type ServiceAccountState,
  type UserState,
  type ValidateOutcome,
} from "./validation.js";

/**
 * The identity domain: login, sessions, token validation, authentication of
 * callers, and the audit trail of each. No transport types here;
 * src/identity/service.ts adapts it to Connect.
 */

export type { InvalidReason, ValidateOutcome } from "./validation.js";

export interface AuthenticatedUser {
  kind: "user" | "service";
  userId: string;
  username: string;
  roles: readonly string[];
  sessionId: string;
}

/** Who is asking, for calls about the caller's own sessions. */
export type Caller = Pick<AuthenticatedUser, "userId" | "sessionId">;

/** Where a request came from, for throttling and the audit trail. */
export interface RequestMeta {
  /** The client's address (src/server/origin.ts): what the throttle counts by. */
  clientAddress: string;
  requestId: string;
  /** For the audit events the request causes; absent outside a request. */
  origin?: RequestOrigin | undefined;
}

/** What a successful login or refresh returns. */
export interface IssuedTokens {
  token: string;
  expiresIn: number;
  refreshToken: string;
  refreshExpiresIn: number;
}

export interface Identity {
  /** `totpCode`: for users with MFA on, a current TOTP code or a recovery code. */
  login(
    username: string,
    password: string,
    meta: RequestMeta,
    totpCode?: string,
  ): Promise<IssuedTokens>;
  readonly mfa: Pick<Mfa, "enroll" | "activate" | "disable" | "reset">;
  /** Rotates a refresh token; a reused one revokes its session. */
  refresh(refreshToken: string, meta: RequestMeta): Promise<IssuedTokens>;
  /** Revokes the caller's session. */
  logout(caller: Caller, meta: RequestMeta): Promise<void>;
  /** Revokes every session of the caller; returns how many were open. */
  logoutAll(caller: Caller, meta: RequestMeta): Promise<number>;
  /**
   * Sets the caller's own password after checking the current one (a wrong one
   * counts as a failed login for throttling); revokes the caller's other
   * sessions and returns how many.
   */
  changePassword(
    caller: Caller,
    currentPassword: string,
    newPassword: string,
    meta: RequestMeta,
  ): Promise<number>;
  /** Introspects the `authorization` header value; never throws for a bad token. */
  validate(authorization: string | null | undefined): Promise<ValidateOutcome>;
  /**
   * Like validate, but throws `unauthenticated` (reason = the invalid reason, upper case).
   * Enrolment-only tokens (MFA_REQUIRED) pass only with `allowMfaEnrollment`.
   */
  authenticate(
    authorization: string | null | undefined,
    options?: { allowMfaEnrollment?: boolean },
  ): Promise<AuthenticatedUser>;
  readonly jwks: readonly PublicJwk[];
  /** Drops this process's cached state of a user after a change made elsewhere in it. */
  forgetUser(userId: string): void;
  /** The same for a service account. */
  forgetServiceAccount(serviceAccountId: string): void;
  /** The same for sessions (revoked by a change made elsewhere in this process). */
  forgetSessions(sessionIds: readonly string[]): void;
  /**
   * Revokes every open session of a user in the caller's transaction (an administrator's or
   * the operator's deactivation or password set, committed with its audit event); their ids, to forget
   * once that transaction committed.
   */
  revokeUserSessions(tx: Queryable, userId: string, reason: string): Promise<string[]>;
}

/** The identity settings an administrator can change while the platform runs. */
export interface IdentitySettings {
  mfaRequired(): boolean;
  tokenTtlSeconds(): number;
}

export interface IdentityDeps {
  users: UserStore;
  /** Service accounts are validated like users: active flag and roles. */
  serviceAccounts: Pick<ServiceAccountStore, "findById">;
  passwords: PasswordHasher;
  tokens: TokenService;
  clock: Clock;
  log: Logger;
  throttle: LoginThrottle;
  sessions: SessionStore;
  mfa: Mfa;
  /** Identity events are committed to the audit log before the answer is sent. */
  audit: Pick<AuditWriter, "write">;
  /**
   * A user's own password change, committed with its audit event in one transaction: stores
   * the new hash, revokes the user's sessions but `keepSessionId`, and appends the event
   * `eventFor(number of sessions revoked)`; the revoked sessions' ids. When the event cannot
   * be written nothing is changed (503 AUDIT_UNAVAILABLE).
   */
  commitPasswordChange(change: {
    userId: string;
    passwordHash: string;
    keepSessionId: string;
    eventFor: (sessionsRevoked: number) => AuditEventInput;
  }): Promise<string[]>;
  refreshTtlSeconds: number;
  /**
   * Settings that change without a restart (`auth.*`, docs/settings.md), read at each
   * login: MFA for everyone (users without it get enrolment-only tokens), and the
   * lifetime of access tokens.
   */
  live: IdentitySettings;
  /**
   * How long a user's active flag and roles, and a session's revocation, are
   * remembered between database reads during validation (default 1 s).
   * Changes made through this process apply at once.
   */
  stateCacheTtlMs?: number;
}

const badCredentials = (): DomainError =>
  unauthenticated("INVALID_CREDENTIALS", "invalid username or password");

export function createIdentity(deps: IdentityDeps): Identity {
  const { users, passwords, tokens, clock, log, throttle, sessions, audit, mfa } = deps;
  const cacheOptions = { ttlMs: deps.stateCacheTtlMs ?? 1000, clock };
  const userStates = createStateCache<UserState | null>(async (id) => {
    const u = await users.findById(id);
    return u ? { id: u.id, username: u.username, isActive: u.isActive, roles: u.roles } : null;
  }, cacheOptions);
  const serviceAccountStates = createStateCache<ServiceAccountState | null>(async (id) => {
    const a = await deps.serviceAccounts.findById(id);
    return a ? { id: a.id, username: a.name, isActive: a.isActive, roles: a.roles } : null;
  }, cacheOptions);
  const sessionStates = createStateCache<SessionState | null>(
    async (id) => (await sessions.find(id)) ?? null,
    cacheOptions,
  );

  /** An access token lives no longer than its session. */
  const accessTtl = (session: IssuedRefreshToken) =>
    Math.min(deps.live.tokenTtlSeconds(), session.sessionExpiresIn);

  async function issueFor(user: UserState, session: IssuedRefreshToken): Promise<IssuedTokens> {
    const access = await tokens.issue({
      id: user.id,
      username: user.username,
      roles: user.roles,
      sessionId: session.sessionId,
      ttlSeconds: accessTtl(session),
    });
    return {
      token: access.token,
      expiresIn: access.expiresIn,
      refreshToken: session.refreshToken,
      refreshExpiresIn: session.refreshExpiresIn,
    };
  }

  const check = createTokenValidation({
    tokens,
    userStates,
    sessionStates,
    serviceAccountStates,
  });
  const validate = async (authorization: string | null | undefined): Promise<ValidateOutcome> => {
    const outcome = await check(authorization);
    return outcome.valid && outcome.enrollmentOnly
      ? { valid: false, reason: "mfa_enrollment_required" }
      : outcome;
  };

  /** An identity event, committed before the caller gets an answer (fail closed). */
  const record = (meta: RequestMeta, event: Omit<AuditEventInput, "requestId">) =>
    audit.write({ ...event, requestId: meta.requestId, origin: meta.origin ?? null });

  const refresh = createRefresh({
    sessions,
    users,
    live: deps.live,
    log,
    refreshTtlSeconds: deps.refreshTtlSeconds,
    record,
    forgetSession: (id) => sessionStates.forget(id),
    issueFor,
  });
  /** The attempt the throttle let through; a refused one is audited and answered 429. */
  async function admitted(decision: ThrottleDecision, meta: RequestMeta, userId?: string) {
    if (decision.kind === "allow") return decision.attempt;
    await record(meta, {
      actorType: userId ? "user" : "anonymous",
      actorId: userId ?? null,
      action: "login",
      target: userId ? `user:${userId}` : null,
      outcome: "denied",
      details: {
        cause: "throttled",
        client_address: meta.clientAddress,
        ...(userId ? { factor: "second_factor" } : {}),
      },
    });
    throw tooManyAttempts(decision.retryAfterMs);
  }

  return {
    jwks: tokens.jwks,
    validate,

    mfa,

    async login(username, password, meta, totpCode) {
      const { clientAddress } = meta;
      // The account is looked up beside the reservation (one round trip less to wait for);
      // its password is checked only once the attempt is reserved.
      const lookup = users.findByUsername(username);
      lookup.catch(() => undefined); // awaited below, unless the attempt is refused
      const attempt = await admitted(
        await throttle.reserve("password", username, clientAddress),
        meta,
      );
      const { user, passwordOk } = await attempt.run(
        async () => {
          const user = await lookup;
          const passwordOk = user
            ? await passwords.verify(user.passwordHash, password)
            : await passwords.verifyDummy(password).then(() => false);
          return { user, passwordOk };
        },
        (r) => r.user !== undefined && r.passwordOk && r.user.isActive,
      );
      if (user === undefined || !passwordOk || !user.isActive) {
        const cause = !user ? "unknown_user" : passwordOk ? "user_inactive" : "wrong_password";
        log.info({ event: "login_failed", cause, user_id: user?.id }, "login failed");
        await record(meta, {
          actorType: user ? "user" : "anonymous",
          actorId: user?.id ?? null,
          action: "login",
          target: user ? `user:${user.id}` : null,
          outcome: "failure",
          details: { cause, client_address: clientAddress },
        });
        throw badCredentials();
      }
      if (user.mfaEnabled) {
        if (!totpCode) {
          throw unauthenticated(
            "MFA_REQUIRED",
            "this account needs a second factor: send totp_code",
          );
        }
        // Second factors have counters of their own: the right password does not reset them.
        const second = await admitted(
          await throttle.reserve("second_factor", user.id, clientAddress),
          meta,
          user.id,
        );
        const checkCode = () => mfa.check(user.id, totpCode);
        if (!(await second.run(checkCode, (ok) => ok))) {
          await record(meta, {
            actorType: "user",
            actorId: user.id,
            action: "login",
            target: `user:${user.id}`,
            outcome: "failure",
            details: { cause: "invalid_mfa_code", client_address: clientAddress },
          });
          throw unauthenticated("INVALID_MFA_CODE", "the second factor is not valid");
        }
      }
      const session = await sessions.create(user.id, deps.refreshTtlSeconds);
      await record(meta, {
        actorType: "user",
        actorId: user.id,
        action: "login",
        target: `session:${session.sessionId}`,
        outcome: "success",
        details: { client_address: clientAddress },
      });
      log.info(
        { event: "login_succeeded", user_id: user.id, session_id: session.sessionId },
        "login",
      );
      if (deps.live.mfaRequired() && !user.mfaEnabled) {
        // Good for enrolling MFA and nothing else; no refresh token: log in again after.
        const access = await tokens.issue({
          id: user.id,
          username: user.username,
          roles: user.roles,
          sessionId: session.sessionId,
          scope: mfaEnrollScope,
          ttlSeconds: accessTtl(session),
        });
        return { ...access, refreshToken: "", refreshExpiresIn: 0 };
      }
      return issueFor(user, session);
    },

    refresh,

    async logout(caller, meta) {
      await sessions.revoke(caller.sessionId, "logout");
      sessionStates.forget(caller.sessionId);
      await record(meta, {
        actorType: "user",
        actorId: caller.userId,
        action: "logout",
        target: `session:${caller.sessionId}`,
        outcome: "success",
      });
    },

    async logoutAll(caller, meta) {
      const revoked = await sessions.revokeAll(caller.userId, "logout_all");
      for (const id of revoked) sessionStates.forget(id);
      await record(meta, {
        actorType: "user",
        actorId: caller.userId,
        action: "logout_all",
        target: `user:${caller.userId}`,
        outcome: "success",
        details: { sessions_revoked: revoked.length },
      });
      return revoked.length;
    },

    async authenticate(authorization, options = {}) {
      const checked = await check(authorization);
      const outcome: ValidateOutcome =
        checked.valid && checked.enrollmentOnly && !options.allowMfaEnrollment
          ? { valid: false, reason: "mfa_enrollment_required" }
          : checked;
      if (!outcome.valid) {
        throw unauthenticated(
          outcome.reason.toUpperCase(),
          `access token is not valid: ${outcome.reason}`,
        );
      }
      return {
        kind: outcome.kind,
        userId: outcome.userId,
        username: outcome.username,
        roles: outcome.roles,
        sessionId: outcome.sessionId,
      };
    },

    async changePassword(caller, currentPassword, newPassword, meta) {
      const { clientAddress } = meta;
      const user = await users.findById(caller.userId);
      if (user === undefined || !user.isActive)
        throw unauthenticated("UNKNOWN_USER", "no such user");
      const decision = await throttle.reserve("password", user.username, clientAddress);
      if (decision.kind === "refuse") throw tooManyAttempts(decision.retryAfterMs);
      const verify = () => passwords.verify(user.passwordHash, currentPassword);
      if (!(await decision.attempt.run(verify, (ok) => ok))) {
        await record(meta, {
          actorType: "user",
          actorId: user.id,
          action: "password_change",
          target: `user:${user.id}`,
          outcome: "failure",
          details: { cause: "wrong_password", client_address: clientAddress },
        });
        // 400, not 401: the caller's token is fine, and clients treat 401 as "log in again".
        throw invalidArgument("WRONG_PASSWORD", "the current password is not right", {
          field: "current_password",
        });
      }
      checkPasswordPolicy(newPassword, user.username, "new_password");
      if (normalizePassword(newPassword) === normalizePassword(currentPassword)) {
        throw invalidArgument("PASSWORD_UNCHANGED", "the new password is the current one", {
          field: "new_password",
        });
      }
      const others = await deps.commitPasswordChange({
        userId: user.id,
        passwordHash: await passwords.hash(newPassword),
        keepSessionId: caller.sessionId,
        eventFor: (revoked) => ({
          actorType: "user",
          actorId: user.id,
          action: "password_change",
          target: `user:${user.id}`,
          outcome: "success",
          requestId: meta.requestId,
          origin: meta.origin ?? null,
          details: { sessions_revoked: revoked },
        }),
      });
      for (const id of others) sessionStates.forget(id);
      return others.length;
    },

    forgetUser: (id) => userStates.forget(id),
    forgetServiceAccount: (id) => serviceAccountStates.forget(id),
    forgetSessions(ids) {
      for (const id of ids) sessionStates.forget(id);
    },

    revokeUserSessions: (tx, userId, reason) => createSessionRevoker(tx).revokeAll(userId, reason),
  };
}
