import { randomUUID } from "node:crypto";
import { DomainError } from "../errors.js";
import type { Queryable } from "../storage/index.js";

/** A service account as stored. Secret hashes never leave the identity area. */
export interface ServiceAccountRecord {
  id: string;
  name: string;
  description: string;
  roles: string[];
  isActive: boolean;
  secretHash: Buffer;
  secretIssuedAt: Date;
  previousSecretHash: Buffer | null;
  previousSecretExpiresAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface NewServiceAccount {
  name: string;
  description: string;
  roles: readonly string[];
  secretHash: Buffer;
}

export interface ServiceAccountChanges {
  description?: string | undefined;
  roles?: readonly string[] | undefined;
  isActive?: boolean | undefined;
}

export interface ServiceAccountStore {
  create(account: NewServiceAccount): Promise<ServiceAccountRecord>;
  findByName(name: string): Promise<ServiceAccountRecord | undefined>;
  findById(id: string): Promise<ServiceAccountRecord | undefined>;
  /** The account, its row locked until the transaction ends (call on a transaction's handle). */
  findByIdForUpdate(id: string): Promise<ServiceAccountRecord | undefined>;
  /** Accounts ordered by name, after `afterName` when given. */
  list(limit: number, afterName?: string): Promise<ServiceAccountRecord[]>;
  /** Applies the set fields; undefined when no account has this id. */
  update(id: string, changes: ServiceAccountChanges): Promise<ServiceAccountRecord | undefined>;
  /** Stores a new secret; the current one stays valid until `previousExpiresAt` (or not at all). */
  rotateSecret(
    id: string,
    secretHash: Buffer,
    previousExpiresAt: Date | null,
  ): Promise<ServiceAccountRecord | undefined>;
  /** The account as it was deleted; undefined when no account has this id. */
  delete(id: string): Promise<ServiceAccountRecord | undefined>;
}

interface Row {
  id: string;
  name: string;
  description: string;
  roles: string[];
  is_active: boolean;
  secret_hash: Uint8Array;
  secret_issued_at: Date | string;
  previous_secret_hash: Uint8Array | null;
  previous_secret_expires_at: Date | string | null;
  created_at: Date | string;
  updated_at: Date | string;
}

const columns =
  "id, name, description, roles, is_active, secret_hash, secret_issued_at, " +
  "previous_secret_hash, previous_secret_expires_at, created_at, updated_at";

const date = (value: Date | string): Date => (value instanceof Date ? value : new Date(value));

const toRecord = (row: Row): ServiceAccountRecord => ({
  id: row.id,
  name: row.name,
  description: row.description,
  roles: row.roles,
  isActive: row.is_active,
  secretHash: Buffer.from(row.secret_hash),
  secretIssuedAt: date(row.secret_issued_at),
  previousSecretHash: row.previous_secret_hash ? Buffer.from(row.previous_secret_hash) : null,
  previousSecretExpiresAt:
    row.previous_secret_expires_at === null ? null : date(row.previous_secret_expires_at),
  createdAt: date(row.created_at),
  updatedAt: date(row.updated_at),
});

const uniqueViolation = "23505";

export function createServiceAccountStore(db: Queryable): ServiceAccountStore {
  const one = async (sql: string, params: unknown[]) => {
    const { rows } = await db.query<Row>(sql, params);
    return rows[0] === undefined ? undefined : toRecord(rows[0]);
  };
  return {
    async create(account) {
      try {
        const created = await one(
          `INSERT INTO service_accounts (id, name, description, roles, secret_hash)
           VALUES ($1, $2, $3, $4, $5) RETURNING ${columns}`,
          [randomUUID(), account.name, account.description, [...account.roles], account.secretHash],
        );
        if (created === undefined) throw new Error("INSERT … RETURNING gave no row");
        return created;
      } catch (err) {
        if ((err as { code?: string }).code === uniqueViolation) {
          throw new DomainError(
            "already_exists",
            "SERVICE_ACCOUNT_EXISTS",
            "a service account with this name exists",
            { field: "name" },
          );
        }
        throw err;
      }
    },
    findByName: (name) => one(`SELECT ${columns} FROM service_accounts WHERE name = $1`, [name]),
    findById: (id) => one(`SELECT ${columns} FROM service_accounts WHERE id = $1`, [id]),
    findByIdForUpdate: (id) =>
      one(`SELECT ${columns} FROM service_accounts WHERE id = $1 FOR UPDATE`, [id]),
    async list(limit, afterName) {
      const { rows } = await db.query<Row>(
        `SELECT ${columns} FROM service_accounts
         WHERE $1::text IS NULL OR name > $1 ORDER BY name LIMIT $2`,
        [afterName ?? null, limit],
      );
      return rows.map(toRecord);
    },
    update(id, changes) {
      return one(
        `UPDATE service_accounts SET
           description = COALESCE($2, description),
           roles = COALESCE($3, roles),
           is_active = COALESCE($4, is_active),
           updated_at = now()
         WHERE id = $1 RETURNING ${columns}`,
        [
          id,
          changes.description ?? null,
          changes.roles === undefined ? null : [...changes.roles],
          changes.isActive ?? null,
        ],
      );
    },
    rotateSecret(id, secretHash, previousExpiresAt) {
      return one(
        `UPDATE service_accounts SET
           previous_secret_hash = CASE WHEN $3::timestamptz IS NULL THEN NULL ELSE secret_hash END,
           previous_secret_expires_at = $3,
           secret_hash = $2,
           secret_issued_at = now(),
           updated_at = now()
         WHERE id = $1 RETURNING ${columns}`,
        [id, secretHash, previousExpiresAt],
      );
    },
    delete: (id) => one(`DELETE FROM service_accounts WHERE id = $1 RETURNING ${columns}`, [id]),
  };
}
