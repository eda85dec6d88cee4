import { DomainError } from "../errors.js";
import type { Queryable } from "../storage/index.js";
import type { PluginManifest } from "./manifest.js";

/** A registered plugin as stored. The credential hash and sealed core secret stay in this area. */
export interface PluginRecord {
  manifest: PluginManifest;
  enabled: boolean;
  unlistedHost: boolean;
  credentialHash: Buffer;
  coreSecretSealed: string;
  credentialsIssuedAt: Date;
  createdAt: Date;
  updatedAt: Date;
}

export interface PluginStore {
  create(record: {
    manifest: PluginManifest;
    unlistedHost: boolean;
    credentialHash: Buffer;
    coreSecretSealed: string;
  }): Promise<PluginRecord>;
  find(id: string): Promise<PluginRecord | undefined>;
  findByCredentialHash(hash: Buffer): Promise<PluginRecord | undefined>;
  list(): Promise<PluginRecord[]>;
  /** With `credentials`, also replaces both secrets in the same statement. */
  updateManifest(
    manifest: PluginManifest,
    unlistedHost: boolean,
    credentials?: { credentialHash: Buffer; coreSecretSealed: string },
  ): Promise<PluginRecord | undefined>;
  setEnabled(id: string, enabled: boolean): Promise<PluginRecord | undefined>;
  setCredentials(
    id: string,
    credentialHash: Buffer,
    coreSecretSealed: string,
  ): Promise<PluginRecord | undefined>;
  delete(id: string): Promise<boolean>;
}

interface Row {
  id: string;
  name: string;
  plugin_type: string;
  endpoints: Record<string, string> | string;
  host: string;
  port: number;
  traits: string[];
  unlisted_host: boolean;
  enabled: boolean;
  credential_hash: Uint8Array;
  core_secret_sealed: string;
  credentials_issued_at: Date | string;
  created_at: Date | string;
  updated_at: Date | string;
}

const columns =
  "id, name, plugin_type, endpoints, host, port, traits, unlisted_host, enabled, credential_hash, " +
  "core_secret_sealed, credentials_issued_at, created_at, updated_at";

const date = (value: Date | string): Date => (value instanceof Date ? value : new Date(value));

const toRecord = (row: Row): PluginRecord => ({
  manifest: {
    id: row.id,
    name: row.name,
    pluginType: row.plugin_type,
    endpoints: typeof row.endpoints === "string" ? JSON.parse(row.endpoints) : row.endpoints,
    host: row.host,
    port: row.port,
    traits: row.traits,
  },
  enabled: row.enabled,
  unlistedHost: row.unlisted_host,
  credentialHash: Buffer.from(row.credential_hash),
  coreSecretSealed: row.core_secret_sealed,
  credentialsIssuedAt: date(row.credentials_issued_at),
  createdAt: date(row.created_at),
  updatedAt: date(row.updated_at),
});

const uniqueViolation = "23505";

export function createPluginStore(db: Queryable): PluginStore {
  const one = async (sql: string, params: unknown[]) => {
    const { rows } = await db.query<Row>(sql, params);
    return rows[0] === undefined ? undefined : toRecord(rows[0]);
  };
  return {
    async create(r) {
      const m = r.manifest;
      try {
        const created = await one(
          `INSERT INTO plugins (id, name, plugin_type, endpoints, host, port, unlisted_host,
                                credential_hash, core_secret_sealed, traits)
           VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10) RETURNING ${columns}`,
          [
            m.id,
            m.name,
            m.pluginType,
            JSON.stringify(m.endpoints),
            m.host,
            m.port,
            r.unlistedHost,
            r.credentialHash,
            r.coreSecretSealed,
            [...m.traits],
          ],
        );
        if (created === undefined) throw new Error("INSERT … RETURNING gave no row");
        return created;
      } catch (err) {
        if ((err as { code?: string }).code === uniqueViolation) {
          throw new DomainError("already_exists", "PLUGIN_EXISTS", "a plugin with this id exists", {
            field: "manifest.id",
          });
        }
        throw err;
      }
    },
    find: (id) => one(`SELECT ${columns} FROM plugins WHERE id = $1`, [id]),
    findByCredentialHash: (hash) =>
      one(`SELECT ${columns} FROM plugins WHERE credential_hash = $1`, [hash]),
    async list() {
      const { rows } = await db.query<Row>(`SELECT ${columns} FROM plugins ORDER BY id`);
      return rows.map(toRecord);
    },
    updateManifest: (m, unlistedHost, credentials) =>
      one(
        `UPDATE plugins SET name = $2, plugin_type = $3, endpoints = $4::jsonb, host = $5,
                port = $6, unlisted_host = $7, traits = $8, updated_at = now(),
                credential_hash = COALESCE($9, credential_hash),
                core_secret_sealed = COALESCE($10, core_secret_sealed),
                credentials_issued_at = CASE WHEN $9::bytea IS NULL THEN credentials_issued_at ELSE now() END
          WHERE id = $1 RETURNING ${columns}`,
        [
          m.id,
          m.name,
          m.pluginType,
          JSON.stringify(m.endpoints),
          m.host,
          m.port,
          unlistedHost,
          [...m.traits],
          credentials?.credentialHash ?? null,
          credentials?.coreSecretSealed ?? null,
        ],
      ),
    setEnabled: (id, enabled) =>
      one(
        `UPDATE plugins SET enabled = $2, updated_at = now() WHERE id = $1 RETURNING ${columns}`,
        [id, enabled],
      ),
    setCredentials: (id, credentialHash, coreSecretSealed) =>
      one(
        `UPDATE plugins SET credential_hash = $2, core_secret_sealed = $3,
                credentials_issued_at = now(), updated_at = now()
          WHERE id = $1 RETURNING ${columns}`,
        [id, credentialHash, coreSecretSealed],
      ),
    async delete(id) {
      const { rows } = await db.query("DELETE FROM plugins WHERE id = $1 RETURNING id", [id]);
      return rows.length > 0;
    },
  };
}
