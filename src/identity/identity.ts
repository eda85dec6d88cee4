import { setTimeout as sleep } from "node:timers/promises";
import { DomainError, invalidArgument, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { PasswordHasher } from "./passwords.js";
import type { LoginThrottle } from "./throttle.js";
import type { Clock, IssuedToken, PublicJwk, TokenInvalidReason, TokenService } from "./tokens.js";
import type { User, UserStore } from "./user-store.js";

/**
 * The identity domain: login, token validation, authentication of callers.
 * No transport types here; src/identity/service.ts adapts it to Connect.
 */

export type InvalidReason = TokenInvalidReason | "unknown_user" | "user_inactive";

export type ValidateOutcome =
  | { valid: true; userId: string; username: string; roles: string[]; expiresAt: Date }
  | { valid: false; reason: InvalidReason };

export interface AuthenticatedUser {
  userId: string;
  username: string;
  roles: string[];
}

export interface NewUserInput {
  username: string;
  email: string;
  password: string;
  roles: readonly string[];
}

export interface Identity {
  /** `clientAddress` feeds the login throttle (src/identity/throttle.ts). */
  login(username: string, password: string, clientAddress: string): Promise<IssuedToken>;
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
  /**
   * How long a user's active flag and roles are remembered between database
   * reads during validation. Changes made through this process apply at once.
   */
  userCacheTtlMs?: number;
}

type UserState = Pick<User, "id" | "username" | "isActive" | "roles">;

const userCacheSize = 10_000;
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
  const { users, passwords, tokens, clock, log, throttle } = deps;
  const ttl = deps.userCacheTtlMs ?? 1000;
  const userCache = new Map<string, { state: UserState | null; at: number }>();
  const inflight = new Map<string, Promise<UserState | null>>();

  const remember = (id: string, state: UserState | null) => {
    if (userCache.size >= userCacheSize) {
      const oldest = userCache.keys().next().value;
      if (oldest !== undefined) userCache.delete(oldest);
    }
    userCache.set(id, { state, at: clock.now() });
  };

  async function userState(id: string): Promise<UserState | null> {
    const cached = userCache.get(id);
    if (cached !== undefined && clock.now() - cached.at < ttl) return cached.state;
    let pending = inflight.get(id);
    if (pending === undefined) {
      pending = users
        .findById(id)
        .then((u) => {
          const state = u
            ? { id: u.id, username: u.username, isActive: u.isActive, roles: u.roles }
            : null;
          remember(id, state);
          return state;
        })
        .finally(() => inflight.delete(id));
      inflight.set(id, pending);
    }
    return pending;
  }

  async function validate(authorization: string | null | undefined): Promise<ValidateOutcome> {
    const token = bearerToken(authorization);
    if (token === undefined) return { valid: false, reason: "missing" };
    if (token === null) return { valid: false, reason: "malformed" };
    const result = await tokens.verify(token);
    if (!result.ok) return { valid: false, reason: result.reason };
    const state = await userState(result.claims.userId);
    if (state === null) return { valid: false, reason: "unknown_user" };
    if (!state.isActive) return { valid: false, reason: "user_inactive" };
    return {
      valid: true,
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
      const issued = await tokens.issue({
        id: user.id,
        username: user.username,
        roles: user.roles,
      });
      log.info({ event: "login_succeeded", user_id: user.id }, "login succeeded");
      return issued;
    },

    async authenticate(authorization) {
      const outcome = await validate(authorization);
      if (!outcome.valid) {
        throw unauthenticated(
          outcome.reason.toUpperCase(),
          `access token is not valid: ${outcome.reason}`,
        );
      }
      return { userId: outcome.userId, username: outcome.username, roles: outcome.roles };
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
      userCache.delete(userId);
      return changed;
    },
  };
}
