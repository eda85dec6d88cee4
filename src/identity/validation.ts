import type { SessionState } from "./session-store.js";
import type { StateCache } from "./state-cache.js";
import type { TokenInvalidReason, TokenService } from "./tokens.js";
import type { User } from "./user-store.js";

/** Validation of access tokens: signature and claims, then the user and the session. */

export type InvalidReason =
  | TokenInvalidReason
  | "unknown_user"
  | "user_inactive"
  | "revoked"
  | "mfa_enrollment_required";

/** Tokens with this scope may only enrol MFA (MFA_REQUIRED and a user without MFA). */
export const mfaEnrollScope = "mfa_enroll";

export type ValidateOutcome =
  | {
      valid: true;
      /** A person, or a service account (client credentials). */
      kind: "user" | "service";
      userId: string;
      username: string;
      roles: string[];
      /** Empty for service accounts, which have no sessions. */
      sessionId: string;
      expiresAt: Date;
      /** The token may only be used to enrol MFA. */
      enrollmentOnly: boolean;
    }
  | { valid: false; reason: InvalidReason };

export type UserState = Pick<User, "id" | "username" | "isActive" | "roles">;

/** What validation needs of a service account: the same as of a user. */
export type ServiceAccountState = UserState;

/** `Bearer <token>` → the token; undefined when absent; null when malformed. */
export function bearerToken(authorization: string | null | undefined): string | undefined | null {
  if (authorization === undefined || authorization === null || authorization === "") {
    return undefined;
  }
  const match = /^Bearer[ \t]+([A-Za-z0-9\-_.~+/]+=*)[ \t]*$/i.exec(authorization);
  return match ? (match[1] ?? null) : null;
}

export function createTokenValidation(deps: {
  tokens: TokenService;
  userStates: StateCache<UserState | null>;
  sessionStates: StateCache<SessionState | null>;
  serviceAccountStates: StateCache<ServiceAccountState | null>;
}): (authorization: string | null | undefined) => Promise<ValidateOutcome> {
  const { tokens, userStates, sessionStates, serviceAccountStates } = deps;
  return async (authorization) => {
    const token = bearerToken(authorization);
    if (token === undefined) return { valid: false, reason: "missing" };
    if (token === null) return { valid: false, reason: "malformed" };
    const result = await tokens.verify(token);
    if (!result.ok) return { valid: false, reason: result.reason };
    const { userId, sessionId } = result.claims;
    if (result.claims.kind === "service") {
      const account = await serviceAccountStates.get(userId);
      if (account === null) return { valid: false, reason: "unknown_user" };
      if (!account.isActive) return { valid: false, reason: "user_inactive" };
      return {
        valid: true,
        kind: "service",
        userId: account.id,
        username: account.username,
        roles: account.roles,
        sessionId: "",
        expiresAt: new Date(result.claims.exp * 1000),
        enrollmentOnly: false,
      };
    }
    const [user, session] = await Promise.all([
      userStates.get(userId),
      sessionStates.get(sessionId),
    ]);
    if (user === null) return { valid: false, reason: "unknown_user" };
    if (!user.isActive) return { valid: false, reason: "user_inactive" };
    if (session === null || session.revoked || session.userId !== userId) {
      return { valid: false, reason: "revoked" };
    }
    return {
      valid: true,
      kind: "user",
      userId: user.id,
      username: user.username,
      roles: user.roles,
      sessionId,
      expiresAt: new Date(result.claims.exp * 1000),
      enrollmentOnly: result.claims.scope === mfaEnrollScope,
    };
  };
}
