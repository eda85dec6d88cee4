import type { Queryable } from "../storage/index.js";

/** The MFA columns of a user and their recovery codes. Secrets arrive sealed. */
export interface MfaRecord {
  enabled: boolean;
  sealedSecret: string | null;
  sealedPending: string | null;
}

export interface MfaStore {
  get(userId: string): Promise<MfaRecord | undefined>;
  /** `get`, locking the user's row until the transaction ends (call it on a transaction). */
  getForUpdate(userId: string): Promise<MfaRecord | undefined>;
  setPending(userId: string, sealedPending: string): Promise<void>;
  /**
   * Turns the pending secret on and replaces the recovery codes (several statements), if MFA
   * is still off and `sealedPending` is still the pending secret; false (nothing changed)
   * otherwise.
   */
  activate(
    userId: string,
    sealedPending: string,
    step: number,
    codeHashes: string[],
  ): Promise<boolean>;
  /** Turns MFA off and deletes the secrets and recovery codes (several statements). */
  disable(userId: string): Promise<void>;
  /** Records `step` as used; false if it (or a later one) was used already. Atomic. */
  acceptStep(userId: string, step: number): Promise<boolean>;
  /** Marks an unused recovery code used; false if there is none. Atomic. */
  useRecoveryCode(userId: string, codeHash: string): Promise<boolean>;
}

/**
 * On a transaction's handle every method joins that transaction: src/identity/mfa.ts runs each
 * change there with its audit event, so that both commit or neither. `activate` and `disable`
 * are several statements: call them on a transaction's handle only.
 */
export function createMfaStore(db: Queryable): MfaStore {
  const read = async (userId: string, lock: "" | " FOR UPDATE") => {
    const { rows } = await db.query<{
      mfa_enabled: boolean;
      mfa_secret: string | null;
      mfa_pending_secret: string | null;
    }>(`SELECT mfa_enabled, mfa_secret, mfa_pending_secret FROM users WHERE id = $1${lock}`, [
      userId,
    ]);
    const row = rows[0];
    return (
      row && {
        enabled: row.mfa_enabled,
        sealedSecret: row.mfa_secret,
        sealedPending: row.mfa_pending_secret,
      }
    );
  };
  return {
    get: (userId) => read(userId, ""),
    getForUpdate: (userId) => read(userId, " FOR UPDATE"),
    async setPending(userId, sealedPending) {
      await db.query("UPDATE users SET mfa_pending_secret = $2, updated_at = now() WHERE id = $1", [
        userId,
        sealedPending,
      ]);
    },
    async activate(userId, sealedPending, step, codeHashes) {
      // A concurrent change of the row (a reset, another activation) is waited for and the
      // condition checked again on the row it left.
      const { rowCount } = await db.query(
        `UPDATE users SET mfa_enabled = true, mfa_secret = mfa_pending_secret,
                mfa_pending_secret = NULL, mfa_last_step = $3, updated_at = now()
          WHERE id = $1 AND NOT mfa_enabled AND mfa_pending_secret = $2`,
        [userId, sealedPending, step],
      );
      if (rowCount !== 1) return false;
      await db.query("DELETE FROM mfa_recovery_codes WHERE user_id = $1", [userId]);
      await db.query(
        "INSERT INTO mfa_recovery_codes (user_id, code_hash) SELECT $1, unnest($2::text[])",
        [userId, codeHashes],
      );
      return true;
    },
    async disable(userId) {
      await db.query(
        `UPDATE users SET mfa_enabled = false, mfa_secret = NULL, mfa_pending_secret = NULL,
                mfa_last_step = NULL, updated_at = now() WHERE id = $1`,
        [userId],
      );
      await db.query("DELETE FROM mfa_recovery_codes WHERE user_id = $1", [userId]);
    },
    async acceptStep(userId, step) {
      const { rowCount } = await db.query(
        `UPDATE users SET mfa_last_step = $2
          WHERE id = $1 AND (mfa_last_step IS NULL OR mfa_last_step < $2)`,
        [userId, step],
      );
      return rowCount === 1;
    },
    async useRecoveryCode(userId, codeHash) {
      const { rowCount } = await db.query(
        `UPDATE mfa_recovery_codes SET used_at = now()
          WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL`,
        [userId, codeHash],
      );
      return rowCount === 1;
    },
  };
}
