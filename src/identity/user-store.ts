import { randomUUID } from "node:crypto";
import { DomainError } from "../errors.js";
import type { Queryable } from "../storage/index.js";

/** A user as the identity area sees it. The password hash never leaves this area. */
export interface User {
  id: string;
  username: string;
  email: string;
  passwordHash: string;
  mfaEnabled: boolean;
  isActive: boolean;
  roles: string[];
}

export interface NewUser {
  username: string;
  email: string;
  passwordHash: string;
  roles: readonly string[];
  isActive?: boolean;
}

export interface UserStore {
  findByUsername(username: string): Promise<User | undefined>;
  findById(id: string): Promise<User | undefined>;
  create(user: NewUser): Promise<User>;
  setActive(id: string, isActive: boolean): Promise<boolean>;
  setPasswordHash(id: string, passwordHash: string): Promise<boolean>;
  count(): Promise<number>;
}

interface UserRow {
  id: string;
  username: string;
  email: string;
  password_hash: string;
  mfa_enabled: boolean;
  is_active: boolean;
  roles: string[];
}

const columns = "id, username, email, password_hash, mfa_enabled, is_active, roles";

const toUser = (row: UserRow): User => ({
  id: row.id,
  username: row.username,
  email: row.email,
  passwordHash: row.password_hash,
  mfaEnabled: row.mfa_enabled,
  isActive: row.is_active,
  roles: row.roles,
});

const uniqueViolation = "23505";

export function createUserStore(db: Queryable): UserStore {
  return {
    async findByUsername(username) {
      const { rows } = await db.query<UserRow>(
        `SELECT ${columns} FROM users WHERE lower(username) = lower($1)`,
        [username],
      );
      return rows[0] && toUser(rows[0]);
    },
    async findById(id) {
      const { rows } = await db.query<UserRow>(`SELECT ${columns} FROM users WHERE id = $1`, [id]);
      return rows[0] && toUser(rows[0]);
    },
    async create(user) {
      try {
        const { rows } = await db.query<UserRow>(
          `INSERT INTO users (id, username, email, password_hash, roles, is_active)
           VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${columns}`,
          [
            randomUUID(),
            user.username,
            user.email,
            user.passwordHash,
            [...user.roles],
            user.isActive ?? true,
          ],
        );
        const row = rows[0];
        if (row === undefined) throw new Error("INSERT … RETURNING returned no row");
        return toUser(row);
      } catch (err) {
        if ((err as { code?: string }).code === uniqueViolation) {
          throw new DomainError(
            "already_exists",
            "USERNAME_TAKEN",
            "a user with this username exists",
            {
              field: "username",
              cause: err,
            },
          );
        }
        throw err;
      }
    },
    async setActive(id, isActive) {
      const { rowCount } = await db.query(
        "UPDATE users SET is_active = $2, updated_at = now() WHERE id = $1",
        [id, isActive],
      );
      return rowCount > 0;
    },
    async setPasswordHash(id, passwordHash) {
      const { rowCount } = await db.query(
        "UPDATE users SET password_hash = $2, updated_at = now() WHERE id = $1",
        [id, passwordHash],
      );
      return rowCount > 0;
    },
    async count() {
      const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM users");
      return rows[0]?.n ?? 0;
    },
  };
}
