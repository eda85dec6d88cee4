import type { Queryable } from "../storage/index.js";

/** The stages of a console session (migration 0014). */
export type ConsoleStage = "enrol" | "api_key" | "active";

/** A console session row, its secrets still sealed. */
export interface ConsoleSessionRow {
  idHash: string;
  stage: ConsoleStage;
  userId: string;
  username: string;
  roles: string[];
  mfa: boolean;
  sealed: string;
  apiKeyId: string | null;
  apiKeyScopes: string[];
  features: string[];
  policyVersion: string;
  clientAddress: string;
  createdAt: Date;
  lastSeenAt: Date;
}

interface Row {
  id_hash: string;
  stage: ConsoleStage;
  user_id: string;
  username: string;
  roles: string[];
  mfa: boolean;
  sealed: string;
  api_key_id: string | null;
  api_key_scopes: string[];
  features: string[];
  policy_version: string;
  client_address: string;
  created_at: Date | string;
  last_seen_at: Date | string;
}

const columns =
  "id_hash, stage, user_id, username, roles, mfa, sealed, api_key_id, api_key_scopes, " +
  "features, policy_version, client_address, created_at, last_seen_at";

const fromRow = (r: Row): ConsoleSessionRow => ({
  idHash: r.id_hash,
  stage: r.stage,
  userId: r.user_id,
  username: r.username,
  roles: r.roles,
  mfa: r.mfa,
  sealed: r.sealed,
  apiKeyId: r.api_key_id,
  apiKeyScopes: r.api_key_scopes,
  features: r.features,
  policyVersion: r.policy_version,
  clientAddress: r.client_address,
  createdAt: new Date(r.created_at),
  lastSeenAt: new Date(r.last_seen_at),
});

/** What may change on a session after it was created. */
export type ConsoleSessionPatch = Partial<
  Pick<
    ConsoleSessionRow,
    "stage" | "sealed" | "apiKeyId" | "apiKeyScopes" | "features" | "policyVersion"
  >
>;

const patchColumns: Record<keyof ConsoleSessionPatch, string> = {
  stage: "stage",
  sealed: "sealed",
  apiKeyId: "api_key_id",
  apiKeyScopes: "api_key_scopes",
  features: "features",
  policyVersion: "policy_version",
};

/** SQL of the console_sessions table. */
export function createConsoleSessionStore(db: Queryable) {
  return {
    async insert(s: ConsoleSessionRow): Promise<void> {
      await db.query(
        `INSERT INTO console_sessions (${columns}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)`,
        [
          s.idHash,
          s.stage,
          s.userId,
          s.username,
          s.roles,
          s.mfa,
          s.sealed,
          s.apiKeyId,
          s.apiKeyScopes,
          s.features,
          s.policyVersion,
          s.clientAddress,
          s.createdAt,
          s.lastSeenAt,
        ],
      );
    },

    async find(idHash: string): Promise<ConsoleSessionRow | undefined> {
      const { rows } = await db.query<Row>(
        `SELECT ${columns} FROM console_sessions WHERE id_hash = $1`,
        [idHash],
      );
      return rows[0] ? fromRow(rows[0]) : undefined;
    },

    async update(idHash: string, patch: ConsoleSessionPatch): Promise<boolean> {
      const entries = Object.entries(patch) as [keyof ConsoleSessionPatch, unknown][];
      if (entries.length === 0) return true;
      const sets = entries.map(([k], i) => `${patchColumns[k]} = $${i + 2}`);
      const { rowCount } = await db.query(
        `UPDATE console_sessions SET ${sets.join(", ")} WHERE id_hash = $1`,
        [idHash, ...entries.map(([, v]) => v)],
      );
      return rowCount > 0;
    },

    async touch(idHash: string, at: Date): Promise<void> {
      await db.query("UPDATE console_sessions SET last_seen_at = $2 WHERE id_hash = $1", [
        idHash,
        at,
      ]);
    },

    /** Deletes the session; true when there was one. */
    async delete(idHash: string): Promise<boolean> {
      const { rowCount } = await db.query("DELETE FROM console_sessions WHERE id_hash = $1", [
        idHash,
      ]);
      return rowCount > 0;
    },

    /** Deletes sessions idle since before `before`; returns how many. */
    async deleteIdle(before: Date): Promise<number> {
      const { rowCount } = await db.query("DELETE FROM console_sessions WHERE last_seen_at < $1", [
        before,
      ]);
      return rowCount;
    },

    /**
     * Takes the refresh lease when nobody holds it (or it ran out): only the process that
     * gets true may use the refresh token.
     */
    async takeRefreshLease(idHash: string, now: Date, until: Date): Promise<boolean> {
      const { rowCount } = await db.query(
        `UPDATE console_sessions SET refreshing_until = $3
          WHERE id_hash = $1 AND (refreshing_until IS NULL OR refreshing_until < $2)`,
        [idHash, now, until],
      );
      return rowCount > 0;
    },

    /** Gives the lease back without new tokens (the refresh failed). */
    async releaseRefreshLease(idHash: string): Promise<void> {
      await db.query("UPDATE console_sessions SET refreshing_until = NULL WHERE id_hash = $1", [
        idHash,
      ]);
    },

    /** Stores refreshed tokens and gives the lease back. */
    async saveRefreshed(idHash: string, sealed: string): Promise<void> {
      await db.query(
        "UPDATE console_sessions SET sealed = $2, refreshing_until = NULL WHERE id_hash = $1",
        [idHash, sealed],
      );
    },
  };
}

export type ConsoleSessionStore = ReturnType<typeof createConsoleSessionStore>;
