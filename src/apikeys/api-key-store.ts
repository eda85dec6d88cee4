import type { Queryable } from "../storage/index.js";

/** An API key as administrators see it: never the key itself nor its hash. */
export interface ApiKeyRecord {
  id: string;
  name: string;
  /** The 8 characters after `tgk_`. */
  prefix: string;
  scopes: string[];
  /** The creating administrator's user id; null when created from the command line. */
  createdBy: string | null;
  createdAt: Date;
  expiresAt: Date | null;
  revokedAt: Date | null;
  revokedBy: string | null;
  lastUsedAt: Date | null;
}

/** What the verifier needs of a key, found by its prefix. */
export interface ApiKeyCredential {
  id: string;
  secretHash: string;
  scopes: string[];
  expiresAt: Date | null;
  revokedAt: Date | null;
}

export interface NewApiKey {
  id: string;
  name: string;
  prefix: string;
  secretHash: string;
  scopes: readonly string[];
  createdBy: string | null;
  createdAt: Date;
  expiresAt: Date | null;
}

export type ApiKeyStatusFilter = "active" | "revoked" | "expired" | undefined;

export interface ApiKeyListQuery {
  limit: number;
  /** Only keys after this one in the listing order (newest first). */
  after?: { createdAt: Date; id: string } | undefined;
  status?: ApiKeyStatusFilter;
  /** What "expired" means: expires_at at or before this time. */
  now: Date;
}

export interface ApiKeyPage {
  keys: ApiKeyRecord[];
  /** The last key of this page when there are more; undefined on the last page. */
  nextAfter: { createdAt: Date; id: string } | undefined;
}

export interface ApiKeyStore {
  /** Inserts the key; false when its prefix is taken (the caller draws another). */
  insert(key: NewApiKey): Promise<boolean>;
  get(id: string): Promise<ApiKeyRecord | undefined>;
  findByPrefix(prefix: string): Promise<ApiKeyCredential | undefined>;
  /** Ordered by created_at, then id, newest first (keyset pagination). */
  list(query: ApiKeyListQuery): Promise<ApiKeyPage>;
  /**
   * Marks the key revoked at `at` by `by` unless it already is (then it stays as it was);
   * the key afterwards and whether it was revoked before, or undefined when there is none.
   */
  revoke(
    id: string,
    by: string | null,
    at: Date,
  ): Promise<{ key: ApiKeyRecord; wasRevoked: boolean } | undefined>;
  /** Sets last_used_at = at unless it was set less than a minute before `at`. */
  touch(id: string, at: Date): Promise<void>;
}

interface RecordRow {
  id: string;
  name: string;
  prefix: string;
  scopes: string[];
  created_by: string | null;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  revoked_by: string | null;
  last_used_at: Date | null;
}

const recordColumns =
  "id, name, prefix, scopes, created_by, created_at, expires_at, revoked_at, revoked_by, last_used_at";

const date = (value: Date | string | null): Date | null =>
  value === null ? null : new Date(value);

const toRecord = (row: RecordRow): ApiKeyRecord => ({
  id: row.id,
  name: row.name,
  prefix: row.prefix,
  scopes: row.scopes,
  createdBy: row.created_by,
  createdAt: new Date(row.created_at),
  expiresAt: date(row.expires_at),
  revokedAt: date(row.revoked_at),
  revokedBy: row.revoked_by,
  lastUsedAt: date(row.last_used_at),
});

export function createApiKeyStore(db: Queryable): ApiKeyStore {
  return {
    async insert(key) {
      // A prefix already taken inserts nothing (no error, so a surrounding transaction
      // stays usable); any other conflict (the id) still raises.
      const { rowCount } = await db.query(
        `INSERT INTO api_keys
           (id, name, prefix, secret_hash, scopes, created_by, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (prefix) DO NOTHING`,
        [
          key.id,
          key.name,
          key.prefix,
          key.secretHash,
          [...key.scopes],
          key.createdBy,
          key.createdAt,
          key.expiresAt,
        ],
      );
      return rowCount === 1;
    },

    async get(id) {
      const { rows } = await db.query<RecordRow>(
        `SELECT ${recordColumns} FROM api_keys WHERE id = $1`,
        [id],
      );
      return rows[0] && toRecord(rows[0]);
    },

    async findByPrefix(prefix) {
      const { rows } = await db.query<{
        id: string;
        secret_hash: string;
        scopes: string[];
        expires_at: Date | null;
        revoked_at: Date | null;
      }>("SELECT id, secret_hash, scopes, expires_at, revoked_at FROM api_keys WHERE prefix = $1", [
        prefix,
      ]);
      const row = rows[0];
      return (
        row && {
          id: row.id,
          secretHash: row.secret_hash,
          scopes: row.scopes,
          expiresAt: date(row.expires_at),
          revokedAt: date(row.revoked_at),
        }
      );
    },

    async list(query) {
      const { rows } = await db.query<RecordRow>(
        `SELECT ${recordColumns} FROM api_keys
         WHERE ($1::timestamptz IS NULL OR (created_at, id) < ($1::timestamptz, $2::uuid))
           AND CASE $3::text
                 WHEN 'active' THEN revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $4)
                 WHEN 'revoked' THEN revoked_at IS NOT NULL
                 WHEN 'expired' THEN revoked_at IS NULL AND expires_at <= $4
                 ELSE true
               END
         ORDER BY created_at DESC, id DESC
         LIMIT $5`,
        [
          query.after?.createdAt ?? null,
          query.after?.id ?? null,
          query.status ?? null,
          query.now,
          query.limit + 1,
        ],
      );
      const page = rows.slice(0, query.limit).map(toRecord);
      const last = page.at(-1);
      return {
        keys: page,
        nextAfter:
          rows.length > query.limit && last
            ? { createdAt: last.createdAt, id: last.id }
            : undefined,
      };
    },

    async revoke(id, by, at) {
      // The subquery locks the row and yields its revocation as it was.
      const { rows } = await db.query<RecordRow & { was_revoked: boolean }>(
        `UPDATE api_keys AS k SET
           revoked_at = coalesce(k.revoked_at, $2),
           revoked_by = CASE WHEN k.revoked_at IS NULL THEN $3::uuid ELSE k.revoked_by END
         FROM (SELECT id, revoked_at IS NOT NULL AS was_revoked
               FROM api_keys WHERE id = $1 FOR UPDATE) AS old
         WHERE k.id = old.id
         RETURNING ${recordColumns
           .split(", ")
           .map((c) => `k.${c}`)
           .join(", ")}, old.was_revoked`,
        [id, at, by],
      );
      const row = rows[0];
      return row && { key: toRecord(row), wasRevoked: row.was_revoked };
    },

    async touch(id, at) {
      await db.query(
        `UPDATE api_keys SET last_used_at = $2::timestamptz
         WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $2::timestamptz - interval '60 seconds')`,
        [id, at],
      );
    },
  };
}
