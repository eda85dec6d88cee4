import type { Queryable } from "../storage/index.js";

export interface AllowlistEntry {
  caller: string;
  target: string;
  operations: string[];
  updatedAt: Date;
}

/** Which caller an entry is for, and which target. */
export type AllowlistPair = Pick<AllowlistEntry, "caller" | "target">;

export interface AllowlistStore {
  put(caller: string, target: string, operations: readonly string[]): Promise<AllowlistEntry>;
  get(caller: string, target: string): Promise<AllowlistEntry | undefined>;
  list(filter: { caller?: string; target?: string }): Promise<AllowlistEntry[]>;
  delete(caller: string, target: string): Promise<AllowlistEntry | undefined>;
  /**
   * Removes every entry naming `name` as caller or as target (a deleted plugin or service
   * account); the pairs removed.
   */
  deleteNaming(name: string): Promise<AllowlistPair[]>;
}

interface Row {
  caller: string;
  target: string;
  operations: string[];
  updated_at: Date | string;
}

const toEntry = (row: Row): AllowlistEntry => ({
  caller: row.caller,
  target: row.target,
  operations: row.operations,
  updatedAt: row.updated_at instanceof Date ? row.updated_at : new Date(row.updated_at),
});

export function createAllowlistStore(db: Queryable): AllowlistStore {
  return {
    async put(caller, target, operations) {
      const { rows } = await db.query<Row>(
        `INSERT INTO operator_allowlist (caller, target, operations) VALUES ($1, $2, $3)
         ON CONFLICT (caller, target)
         DO UPDATE SET operations = EXCLUDED.operations, updated_at = now()
         RETURNING caller, target, operations, updated_at`,
        [caller, target, [...operations]],
      );
      const row = rows[0];
      if (row === undefined) throw new Error("upsert … RETURNING gave no row");
      return toEntry(row);
    },
    async get(caller, target) {
      const { rows } = await db.query<Row>(
        "SELECT caller, target, operations, updated_at FROM operator_allowlist WHERE caller = $1 AND target = $2",
        [caller, target],
      );
      return rows[0] === undefined ? undefined : toEntry(rows[0]);
    },
    async list(filter) {
      const { rows } = await db.query<Row>(
        `SELECT caller, target, operations, updated_at FROM operator_allowlist
          WHERE ($1::text IS NULL OR caller = $1) AND ($2::text IS NULL OR target = $2)
          ORDER BY caller, target`,
        [filter.caller ?? null, filter.target ?? null],
      );
      return rows.map(toEntry);
    },
    async delete(caller, target) {
      const { rows } = await db.query<Row>(
        `DELETE FROM operator_allowlist WHERE caller = $1 AND target = $2
         RETURNING caller, target, operations, updated_at`,
        [caller, target],
      );
      return rows[0] === undefined ? undefined : toEntry(rows[0]);
    },
    async deleteNaming(name) {
      const { rows } = await db.query<AllowlistPair>(
        "DELETE FROM operator_allowlist WHERE caller = $1 OR target = $1 RETURNING caller, target",
        [name],
      );
      return rows;
    },
  };
}
