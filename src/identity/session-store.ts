import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { Database, Queryable } from "../storage/index.js";

/**
 * Sessions and refresh tokens. A refresh token is shown to the client once
 * and stored as its SHA-256; using it marks it used and issues the next one
 * in the same session (rotation). Presenting a used token again means it was
 * stolen or replayed, and the whole session is revoked.
 *
 * A session also has an absolute lifetime, counted from its login (`sessions.created_at`, which
 * rotations keep): no refresh token outlives it, and once it is over no refresh succeeds
 * (OWASP ASVS 3.3): the user logs in again. Sessions opened before this limit existed have
 * their login time too, so the limit applies to them alike.
 */

export interface SessionState {
  id: string;
  userId: string;
  revoked: boolean;
}

/** A refresh token just issued, and how long it and its session have left, in seconds. */
export interface IssuedRefreshToken {
  sessionId: string;
  refreshToken: string;
  /** The refresh token's lifetime: its TTL, or what is left of the session when that is less. */
  refreshExpiresIn: number;
  /** Until the session's absolute end (at least 1). */
  sessionExpiresIn: number;
}

export type RefreshOutcome =
  | ({ kind: "rotated"; userId: string } & IssuedRefreshToken)
  | { kind: "unknown" | "expired" | "revoked" }
  | { kind: "reused"; sessionId: string; userId: string };

export interface SessionStore {
  /** A new session with its first refresh token. */
  create(userId: string, refreshTtlSeconds: number): Promise<IssuedRefreshToken>;
  /** "expired" also when the session's absolute lifetime is over. */
  refresh(refreshToken: string, refreshTtlSeconds: number): Promise<RefreshOutcome>;
  find(sessionId: string): Promise<SessionState | undefined>;
  revoke(sessionId: string, reason: string): Promise<boolean>;
  /** Revokes every open session of the user, but `exceptSessionId`; returns their ids. */
  revokeAll(userId: string, reason: string, exceptSessionId?: string): Promise<string[]>;
}

export const hashRefreshToken = (token: string): string =>
  createHash("sha256").update(token).digest("hex");

const newRefreshToken = (): string => `rt_${randomBytes(32).toString("base64url")}`;

interface TokenRow {
  session_id: string;
  user_id: string;
  expired: boolean;
  used: boolean;
  revoked: boolean;
  /** Whole seconds until the session's absolute end; 0 or less once it is over. */
  session_left: number;
}

export interface SessionStoreOptions {
  /** A session's absolute lifetime from its login, in seconds (SESSION_MAX_LIFETIME_SECONDS). */
  maxLifetimeSeconds: number;
}

export function createSessionStore(db: Database, options: SessionStoreOptions): SessionStore {
  const { maxLifetimeSeconds } = options;
  return {
    async create(userId, ttl) {
      const sessionId = randomUUID();
      const refreshToken = newRefreshToken();
      const refreshExpiresIn = Math.min(ttl, maxLifetimeSeconds);
      // The session and its first refresh token in one statement, atomic as a transaction
      // would be, without its BEGIN and COMMIT (on PGlite each runs on the event loop).
      await db.query(
        `WITH session AS (
           INSERT INTO sessions (id, user_id) VALUES ($1, $2) RETURNING id
         )
         INSERT INTO refresh_tokens (token_hash, session_id, expires_at)
         SELECT $3::text, id, now() + make_interval(secs => $4::float8) FROM session`,
        [sessionId, userId, hashRefreshToken(refreshToken), refreshExpiresIn],
      );
      return { sessionId, refreshToken, refreshExpiresIn, sessionExpiresIn: maxLifetimeSeconds };
    },

    async refresh(refreshToken, ttl) {
      return db.transaction(async (tx) => {
        const { rows } = await tx.query<TokenRow>(
          `SELECT t.session_id, s.user_id, t.expires_at <= now() AS expired,
                  t.used_at IS NOT NULL AS used, s.revoked_at IS NOT NULL AS revoked,
                  floor(extract(epoch FROM s.created_at + make_interval(secs => $2) - now()))::int
                    AS session_left
             FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
            WHERE t.token_hash = $1
            FOR UPDATE OF t, s`,
          [hashRefreshToken(refreshToken), maxLifetimeSeconds],
        );
        const row = rows[0];
        if (row === undefined) return { kind: "unknown" };
        if (row.revoked) return { kind: "revoked" };
        if (row.used) {
          await tx.query(
            "UPDATE sessions SET revoked_at = now(), revoked_reason = 'refresh_token_reused' WHERE id = $1",
            [row.session_id],
          );
          return { kind: "reused", sessionId: row.session_id, userId: row.user_id };
        }
        // A session older than the limit ends here, whatever its refresh token says (those
        // issued before the limit existed ran for their full TTL).
        if (row.expired || row.session_left < 1) return { kind: "expired" };
        await tx.query("UPDATE refresh_tokens SET used_at = now() WHERE token_hash = $1", [
          hashRefreshToken(refreshToken),
        ]);
        const next = newRefreshToken();
        const refreshExpiresIn = Math.min(ttl, row.session_left);
        await tx.query(
          `INSERT INTO refresh_tokens (token_hash, session_id, expires_at)
           VALUES ($1, $2, now() + make_interval(secs => $3))`,
          [hashRefreshToken(next), row.session_id, refreshExpiresIn],
        );
        return {
          kind: "rotated",
          sessionId: row.session_id,
          userId: row.user_id,
          refreshToken: next,
          refreshExpiresIn,
          sessionExpiresIn: row.session_left,
        };
      });
    },

    async find(sessionId) {
      const { rows } = await db.query<{ id: string; user_id: string; revoked: boolean }>(
        "SELECT id, user_id, revoked_at IS NOT NULL AS revoked FROM sessions WHERE id = $1",
        [sessionId],
      );
      const row = rows[0];
      return row && { id: row.id, userId: row.user_id, revoked: row.revoked };
    },

    ...createSessionRevoker(db),
  };
}

/**
 * The store's revocations. Each is one statement, so on a transaction's handle it joins that
 * transaction: an administrator's change that ends a user's sessions (deactivation, a
 * password set) commits with them and with its audit event, or not at all.
 */
export function createSessionRevoker(db: Queryable): Pick<SessionStore, "revoke" | "revokeAll"> {
  return {
    async revoke(sessionId, reason) {
      const { rowCount } = await db.query(
        "UPDATE sessions SET revoked_at = now(), revoked_reason = $2 WHERE id = $1 AND revoked_at IS NULL",
        [sessionId, reason],
      );
      return rowCount > 0;
    },

    async revokeAll(userId, reason, exceptSessionId) {
      const { rows } = await db.query<{ id: string }>(
        `UPDATE sessions SET revoked_at = now(), revoked_reason = $2
          WHERE user_id = $1 AND revoked_at IS NULL AND id IS DISTINCT FROM $3::uuid
          RETURNING id`,
        [userId, reason, exceptSessionId ?? null],
      );
      return rows.map((r) => r.id);
    },
  };
}
