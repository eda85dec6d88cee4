import { setTimeout as sleep } from "node:timers/promises";
import { DomainError, invalidArgument, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { PasswordHasher } from "./passwords.js";
import type { SessionState, SessionStore } from "./session-store.js";
import { createStateCache } from "./state-cache.js";
import type { LoginThrottle } from "./throttle.js";
import type { Clock, PublicJwk, TokenInvalidReason, TokenService } from "./tokens.js";
import type { User, UserStore } from "./user-store.js";

/**
 * The identity domain: login, token validation, authentication of callers.
 * No transport types here; src/identity/service.ts adapts it to Connect.
 */

export type InvalidReason = TokenInvalidReason | "unknown_user" | "user_inactive" | "revoked";

export type ValidateOutcome =
  | {
      valid: true;
      userId: string;
      username: string;
      roles: string[];
      sessionId: string;
      expiresAt: Date;
    }
  | { valid: false; reason: InvalidReason };

export interface AuthenticatedUser {
  userId: string;
  username: string;
  roles: string[];
  sessionId: string;
}

/** Who is asking, for calls about the caller's own sessions. */
export type Caller = Pick<AuthenticatedUser, "userId" | "sessionId">;

/** What a successful login or refresh returns. */
export interface IssuedTokens {
  token: string;
  expiresIn: number;
  refreshToken: string;
  refreshExpiresIn: number;
}

export interface NewUserInput {
  username: string;
  email: string;
  password: string;
  roles: readonly string[];
}

export interface Identity {
  /** `clientAddress` feeds the login throttle (src/identity/throttle.ts). */
  login(username: string, password: string, clientAddress: string): Promise<IssuedTokens>;
  /** Rotates a refresh token; a reused one revokes its session. */
  refresh(refreshToken: string): Promise<IssuedTokens>;
  /** Revokes the caller's session. */
  logout(caller: Caller): Promise<void>;
  /** Revokes every session of the caller; returns how many were open. */
  logoutAll(caller: Caller): Promise<number>;
  /** Introspects the `authorization` header value; never throws for a bad token. */
  validate(authorization: string | null | undefined): Promise<ValidateOutcome>;
  /** Like validate, but throws `unauthenticated` (reason = the invalid reason, upper case). */
  authenticate(authorization: string | null | undefined): Promise<AuthenticatedUser>;
  readonly jwks: readonly PublicJwk[];
  createUser(input: NewUserInput): Promise<Omit<User, "passwordHash">>;
  setActive(userId: string, isActive: boolean): Promise<boolean>;
  /** Sets a new password for the user with this username; false if there is none. */
  setPassword(username: string, password: string): Promise<boolean>;
}

export interface IdentityDeps {
  users: UserStore;
  passwords: PasswordHasher;
  tokens: TokenService;
  clock: Clock;
  log: Logger;
  throttle: LoginThrottle;
  sessions: SessionStore;
  refreshTtlSeconds: number;
  /**
   * How long a user's active flag and roles, and a session's revocation, are
   * remembered between database reads during validation (default 1 s).
   * Changes made through this process apply at once.
   */
  stateCacheTtlMs?: number;
}

type UserState = Pick<User, "id" | "username" | "isActive" | "roles">;

const usernamePattern = /^[A-Za-z0-9._@-]{3,128}$/;

/** `Bearer <token>` → the token; undefined when absent; null when malformed. */
function bearerToken(authorization: string | null | undefined): string | undefined | null {
  if (authorization === undefined || authorization === null || authorization === "")
    return undefined;
  const match = /^Bearer[ \t]+([A-Za-z0-9\-_.~+/]+=*)[ \t]*$/i.exec(authorization);
  return match ? (match[1] ?? null) : null;
}

function checkPassword(password: string): void {
  if (password.length < 12) {
    throw invalidArgument("PASSWORD_TOO_SHORT", "password must be at least 12 characters", {
      field: "password",
    });
  }
}

const badCredentials = (): DomainError =>
  unauthenticated("INVALID_CREDENTIALS", "invalid username or password");

export function createIdentity(deps: IdentityDeps): Identity {
  const { users, passwords, tokens, clock, log, throttle, sessions } = deps;
  const cacheOptions = { ttlMs: deps.stateCacheTtlMs ?? 1000, clock };
  const userStates = createStateCache<UserState | null>(async (id) => {
    const u = await users.findById(id);
    return u ? { id: u.id, username: u.username, isActive: u.isActive, roles: u.roles } : null;
  }, cacheOptions);
  const sessionStates = createStateCache<SessionState | null>(
    async (id) => (await sessions.find(id)) ?? null,
    cacheOptions,
  );

  async function issueFor(user: UserState, sessionId: string, refreshToken: string) {
    const access = await tokens.issue({ ...user, sessionId });
    return {
      token: access.token,
      expiresIn: access.expiresIn,
      refreshToken,
      refreshExpiresIn: deps.refreshTtlSeconds,
    };
  }

  async function validate(authorization: string | null | undefined): Promise<ValidateOutcome> {
    const token = bearerToken(authorization);
    if (token === undefined) return { valid: false, reason: "missing" };
    if (token === null) return { valid: false, reason: "malformed" };
    const result = await tokens.verify(token);
    if (!result.ok) return { valid: false, reason: result.reason };
    const { userId, sessionId } = result.claims;
    const [state, session] = await Promise.all([
      userStates.get(userId),
      sessionStates.get(sessionId),
    ]);
    if (state === null) return { valid: false, reason: "unknown_user" };
    if (!state.isActive) return { valid: false, reason: "user_inactive" };
    if (session === null || session.revoked || session.userId !== userId) {
      return { valid: false, reason: "revoked" };
    }
    return {
      valid: true,
      sessionId,
      userId: state.id,
      username: state.username,
      roles: state.roles,
      expiresAt: new Date(result.claims.exp * 1000),
    };
  }

  return {
    jwks: tokens.jwks,
    validate,

    async login(username, password, clientAddress) {
      const decision = throttle.check(username, clientAddress);
      if (decision.kind === "refuse") {
        log.info({ event: "login_throttled" }, "login refused by throttling");
        throw new DomainError(
          "resource_exhausted",
          "TOO_MANY_ATTEMPTS",
          "too many failed logins; try again later",
          { retryAfterSeconds: decision.retryAfterMs / 1000 },
        );
      }
      if (decision.delayMs > 0) await sleep(decision.delayMs);
      const user = await users.findByUsername(username);
      if (user === undefined) {
        await passwords.verifyDummy(password);
        throttle.recordFailure(username, clientAddress);
        log.info({ event: "login_failed", cause: "unknown_user" }, "login failed");
        throw badCredentials();
      }
      const passwordOk = await passwords.verify(user.passwordHash, password);
      if (!passwordOk || !user.isActive) {
        throttle.recordFailure(username, clientAddress);
        const cause = passwordOk ? "user_inactive" : "wrong_password";
        log.info({ event: "login_failed", cause, user_id: user.id }, "login failed");
        throw badCredentials();
      }
      throttle.recordSuccess(username, clientAddress);
      const session = await sessions.create(user.id, deps.refreshTtlSeconds);
      log.info(
        { event: "login_succeeded", user_id: user.id, session_id: session.sessionId },
        "login succeeded",
      );
      return issueFor(user, session.sessionId, session.refreshToken);
    },

    async refresh(refreshToken) {
      const outcome = await sessions.refresh(refreshToken, deps.refreshTtlSeconds);
      if (outcome.kind === "reused") {
        sessionStates.forget(outcome.sessionId);
        log.warn(
          { event: "refresh_token_reused", user_id: outcome.userId, session_id: outcome.sessionId },
          "a used refresh token was presented again: session revoked",
        );
        throw unauthenticated(
          "REFRESH_TOKEN_REUSED",
          "refresh token was already used; session revoked",
        );
      }
      if (outcome.kind !== "rotated") {
        throw unauthenticated("INVALID_REFRESH_TOKEN", "refresh token is not valid");
      }
      const user = await userStates.get(outcome.userId);
      if (user === null || !user.isActive) {
        await sessions.revoke(outcome.sessionId, "user_inactive");
        sessionStates.forget(outcome.sessionId);
        throw unauthenticated("INVALID_REFRESH_TOKEN", "refresh token is not valid");
      }
      return issueFor(user, outcome.sessionId, outcome.refreshToken);
    },

    async logout(caller) {
      await sessions.revoke(caller.sessionId, "logout");
      sessionStates.forget(caller.sessionId);
      log.info({ event: "logout", user_id: caller.userId, session_id: caller.sessionId }, "logout");
    },

    async logoutAll(caller) {
      const revoked = await sessions.revokeAll(caller.userId, "logout_all");
      for (const id of revoked) sessionStates.forget(id);
      log.info({ event: "logout_all", user_id: caller.userId, sessions: revoked.length }, "logout");
      return revoked.length;
    },

    async authenticate(authorization) {
      const outcome = await validate(authorization);
      if (!outcome.valid) {
        throw unauthenticated(
          outcome.reason.toUpperCase(),
          `access token is not valid: ${outcome.reason}`,
        );
      }
      return {
        userId: outcome.userId,
        username: outcome.username,
        roles: outcome.roles,
        sessionId: outcome.sessionId,
      };
    },

    async createUser(input) {
      if (!usernamePattern.test(input.username)) {
        throw invalidArgument(
          "INVALID_USERNAME",
          "username must be 3–128 letters, digits or . _ @ -",
          {
            field: "username",
          },
        );
      }
      checkPassword(input.password);
      const passwordHash = await passwords.hash(input.password);
      const { passwordHash: _hidden, ...user } = await users.create({
        username: input.username,
        email: input.email,
        passwordHash,
        roles: input.roles,
      });
      return user;
    },

    async setPassword(username, password) {
      checkPassword(password);
      const user = await users.findByUsername(username);
      if (user === undefined) return false;
      return users.setPasswordHash(user.id, await passwords.hash(password));
    },

    async setActive(userId, isActive) {
      const changed = await users.setActive(userId, isActive);
      userStates.forget(userId);
      return changed;
    },
  };
}
