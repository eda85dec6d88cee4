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

export function createUserStore(db: Queryable): UserStore & UserAdminStore {
  return {
    ...createUserAdminStore(db),
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

/** A user as administrators see it: everything but the password hash, with timestamps. */
export interface UserRecord extends Omit<User, "passwordHash"> {
  createdAt: Date;
  updatedAt: Date;
}

export interface UserListQuery {
  /** At most this many users. */
  limit: number;
  /** Only users whose `lower(username)` sorts after this (a page's `nextAfter`). */
  after?: string | undefined;
  role?: string | undefined;
  isActive?: boolean | undefined;
  /** Only usernames starting with this, compared case-insensitively. */
  usernamePrefix?: string | undefined;
}

export interface UserPage {
  /** Ordered by `lower(username)`. */
  users: UserRecord[];
  /** Where the next page starts (pass as `after`); undefined on the last page. */
  nextAfter: string | undefined;
}

/** Changes to a user; undefined fields stay as they are. */
export interface UserChanges {
  email?: string | undefined;
  roles?: readonly string[] | undefined;
  isActive?: boolean | undefined;
}

/**
 * What user administration needs beyond {@link UserStore}. A separate interface, so that
 * the identity domain and its test doubles need not implement it.
 */
export interface UserAdminStore {
  getRecord(id: string): Promise<UserRecord | undefined>;
  /** One page of users, keyset-paginated on `lower(username)` (unique). */
  list(query: UserListQuery): Promise<UserPage>;
  /** Applies the changes in one statement; the row as it was and as it is, or undefined. */
  update(
    id: string,
    changes: UserChanges,
  ): Promise<{ before: UserRecord; after: UserRecord } | undefined>;
  /** Deletes the user (their sessions go with them); the deleted row, or undefined. */
  delete(id: string): Promise<UserRecord | undefined>;
}

interface UserRecordRow {
  id: string;
  username: string;
  email: string;
  mfa_enabled: boolean;
  is_active: boolean;
  roles: string[];
  /** A Date from the driver; an ISO 8601 string inside JSON (`to_jsonb`). */
  created_at: Date | string;
  updated_at: Date | string;
}

const recordColumns = "id, username, email, mfa_enabled, is_active, roles, created_at, updated_at";

const toRecord = (row: UserRecordRow): UserRecord => ({
  id: row.id,
  username: row.username,
  email: row.email,
  mfaEnabled: row.mfa_enabled,
  isActive: row.is_active,
  roles: row.roles,
  createdAt: new Date(row.created_at),
  updatedAt: new Date(row.updated_at),
});

const qualified = (table: string): string =>
  recordColumns
    .split(", ")
    .map((c) => `${table}.${c}`)
    .join(", ");

function createUserAdminStore(db: Queryable): UserAdminStore {
  return {
    async getRecord(id) {
      const { rows } = await db.query<UserRecordRow>(
        `SELECT ${recordColumns} FROM users WHERE id = $1`,
        [id],
      );
      return rows[0] && toRecord(rows[0]);
    },

    async list(query) {
      const { rows } = await db.query<UserRecordRow & { sort_key: string }>(
        `SELECT ${recordColumns}, lower(username) AS sort_key FROM users
         WHERE ($1::text IS NULL OR lower(username) > $1::text)
           AND ($2::text IS NULL OR $2::text = ANY (roles))
           AND ($3::boolean IS NULL OR is_active = $3::boolean)
           AND ($4::text IS NULL OR starts_with(lower(username), lower($4::text)))
         ORDER BY lower(username)
         LIMIT $5`,
        [
          query.after ?? null,
          query.role ?? null,
          query.isActive ?? null,
          query.usernamePrefix ?? null,
          query.limit + 1,
        ],
      );
      const page = rows.slice(0, query.limit);
      return {
        users: page.map(toRecord),
        nextAfter: rows.length > query.limit ? page.at(-1)?.sort_key : undefined,
      };
    },

    async update(id, changes) {
      // The subquery locks the row and yields it as it was; RETURNING gives both versions.
      const { rows } = await db.query<UserRecordRow & { before: UserRecordRow }>(
        `UPDATE users AS u SET
           email = coalesce($2::text, u.email),
           roles = coalesce($3::text[], u.roles),
           is_active = coalesce($4::boolean, u.is_active),
           updated_at = now()
         FROM (SELECT ${recordColumns} FROM users WHERE id = $1 FOR UPDATE) AS old
         WHERE u.id = old.id
         RETURNING to_jsonb(old) AS before, ${qualified("u")}`,
        [
          id,
          changes.email ?? null,
          changes.roles === undefined ? null : [...changes.roles],
          changes.isActive ?? null,
        ],
      );
      const row = rows[0];
      return row && { before: toRecord(row.before), after: toRecord(row) };
    },

    async delete(id) {
      const { rows } = await db.query<UserRecordRow>(
        `DELETE FROM users WHERE id = $1 RETURNING ${recordColumns}`,
        [id],
      );
      return rows[0] && toRecord(rows[0]);
    },
  };
}
