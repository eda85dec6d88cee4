import type { AuditEventInput } from "../audit/index.js";
import { unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { IdentitySettings, IssuedTokens, RequestMeta } from "./identity.js";
import type { IssuedRefreshToken, SessionStore } from "./session-store.js";
import type { UserStore } from "./user-store.js";
import type { UserState } from "./validation.js";

/**
 * Refresh: rotates a refresh token (a reused one revokes its session), then checks again
 * everything login checks, on the user as the database has it now: the account exists and is
 * active, and has MFA when MFA is required. A session that fails is ended, with its audit
 * event. The new tokens carry the user's current roles and end with the session at the latest
 * (its absolute lifetime, src/identity/session-store.ts).
 */

export interface RefreshDeps {
  sessions: Pick<SessionStore, "refresh" | "revoke">;
  users: Pick<UserStore, "findById">;
  live: Pick<IdentitySettings, "mfaRequired">;
  log: Logger;
  refreshTtlSeconds: number;
  /** Writes an identity event before the answer is sent (fail closed). */
  record(meta: RequestMeta, event: Omit<AuditEventInput, "requestId">): Promise<unknown>;
  /** Drops this process's cached state of a session just revoked. */
  forgetSession(sessionId: string): void;
  /** The access token for the rotated refresh token, as login issues it. */
  issueFor(user: UserState, session: IssuedRefreshToken): Promise<IssuedTokens>;
}

type RefusalCause = "user_inactive" | "unknown_user" | "mfa_enrollment_required";

export function createRefresh(
  deps: RefreshDeps,
): (refreshToken: string, meta: RequestMeta) => Promise<IssuedTokens> {
  const { sessions, users, log, record } = deps;

  /** Ends a session whose refresh a re-check refused, and records why. */
  async function endSession(
    meta: RequestMeta,
    session: { sessionId: string; userId: string },
    cause: RefusalCause,
  ): Promise<void> {
    await sessions.revoke(session.sessionId, cause);
    deps.forgetSession(session.sessionId);
    log.info(
      { event: "refresh_refused", cause, user_id: session.userId, session_id: session.sessionId },
      "refresh refused: session ended",
    );
    await record(meta, {
      actorType: "user",
      actorId: session.userId,
      action: "refresh",
      target: `session:${session.sessionId}`,
      outcome: "denied",
      details: { cause, session_revoked: true },
    });
  }

  return async (refreshToken, meta) => {
    const outcome = await sessions.refresh(refreshToken, deps.refreshTtlSeconds);
    if (outcome.kind === "reused") {
      deps.forgetSession(outcome.sessionId);
      log.warn(
        { event: "refresh_token_reused", user_id: outcome.userId, session_id: outcome.sessionId },
        "a used refresh token was presented again: session revoked",
      );
      await record(meta, {
        actorType: "user",
        actorId: outcome.userId,
        action: "refresh",
        target: `session:${outcome.sessionId}`,
        outcome: "denied",
        details: { cause: "refresh_token_reused", session_revoked: true },
      });
      throw unauthenticated(
        "REFRESH_TOKEN_REUSED",
        "refresh token was already used; session revoked",
      );
    }
    if (outcome.kind !== "rotated") {
      throw unauthenticated("INVALID_REFRESH_TOKEN", "refresh token is not valid");
    }
    // Read afresh, not from the validation cache: a change made on another process counts.
    const user = await users.findById(outcome.userId);
    if (user === undefined || !user.isActive) {
      await endSession(meta, outcome, user ? "user_inactive" : "unknown_user");
      throw unauthenticated("INVALID_REFRESH_TOKEN", "refresh token is not valid");
    }
    if (deps.live.mfaRequired() && !user.mfaEnabled) {
      // Login would give this user an enrolment-only token and no refresh token: log in again.
      await endSession(meta, outcome, "mfa_enrollment_required");
      throw unauthenticated(
        "MFA_ENROLLMENT_REQUIRED",
        "MFA is required and this account has none: log in again to enrol",
      );
    }
    return deps.issueFor(user, outcome);
  };
}
