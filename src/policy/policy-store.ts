import type { Queryable } from "../storage/index.js";
import type { TraitDefinition } from "./registry.js";
import type { PolicyDocument } from "./types.js";

/** The channel every process listens on; the payload is the new generation. */
export const policyChannel = "traitgate_policy";

/** What a process needs to build its engine: read in one statement, so they agree. */
export interface PolicySnapshot {
  generation: number;
  activeVersion: string | undefined;
  document: PolicyDocument | undefined;
  /** Registered traits (built-ins are not stored), by name. */
  traits: TraitDefinition[];
}

export interface StoredTrait extends TraitDefinition {
  updatedAt: Date;
  updatedBy: string;
}

export interface StoredVersion {
  seq: number;
  version: string;
  description: string;
  ruleCount: number;
  createdAt: Date;
  createdBy: string;
  createdByUserId: string;
}

export interface StoredActivation {
  seq: number;
  version: string;
  previousVersion: string;
  activatedAt: Date;
  activatedBy: string;
  activatedByUserId: string;
  requestId: string;
}

/** Who made a change: a username (or "system") and the user id, if any. */
export interface ChangeAuthor {
  username: string;
  userId: string | null;
  requestId: string | null;
}

interface TraitRow {
  name: string;
  description: string;
  implies: string[];
  conflicts: string[];
  updated_at: Date | string;
  updated_by: string;
}

interface VersionRow {
  seq: string;
  version: string;
  description: string;
  rule_count: number;
  created_at: Date | string;
  created_by: string;
  created_by_user_id: string | null;
}

const toTrait = (row: TraitRow): StoredTrait => ({
  name: row.name,
  ...(row.description ? { description: row.description } : {}),
  implies: row.implies,
  conflicts: row.conflicts,
  updatedAt: new Date(row.updated_at),
  updatedBy: row.updated_by,
});

const toVersion = (row: VersionRow): StoredVersion => ({
  seq: Number(row.seq),
  version: row.version,
  description: row.description,
  ruleCount: row.rule_count,
  createdAt: new Date(row.created_at),
  createdBy: row.created_by,
  createdByUserId: row.created_by_user_id ?? "",
});

const versionColumns =
  "seq, version, description, rule_count, created_at, created_by, created_by_user_id";

/** SQL of the policy area (src/storage/migrations/0009_policy.sql). */
export const policyStore = {
  async generation(db: Queryable): Promise<number> {
    const { rows } = await db.query<{ generation: string }>("SELECT generation FROM policy_state");
    return Number(rows[0]?.generation ?? 0);
  },

  /** The state row, locked for the caller's transaction. */
  async lockState(
    tx: Queryable,
  ): Promise<{ generation: number; activeVersion: string | undefined }> {
    const { rows } = await tx.query<{ generation: string; active_version: string | null }>(
      "SELECT generation, active_version FROM policy_state FOR UPDATE",
    );
    const row = rows[0];
    if (row === undefined) throw new Error("policy_state has no row (migration 0009)");
    return { generation: Number(row.generation), activeVersion: row.active_version ?? undefined };
  },

  async snapshot(db: Queryable): Promise<PolicySnapshot> {
    const { rows } = await db.query<{
      generation: string;
      active_version: string | null;
      document: PolicyDocument | null;
      traits: TraitRow[] | null;
    }>(
      `SELECT s.generation, s.active_version, v.document,
              (SELECT json_agg(json_build_object('name', name, 'description', description,
                        'implies', implies, 'conflicts', conflicts) ORDER BY name)
                 FROM policy_traits) AS traits
         FROM policy_state s LEFT JOIN policy_versions v ON v.version = s.active_version`,
    );
    const row = rows[0];
    if (row === undefined) throw new Error("policy_state has no row (migration 0009)");
    return {
      generation: Number(row.generation),
      activeVersion: row.active_version ?? undefined,
      document: row.document ?? undefined,
      traits: (row.traits ?? []).map((t) => ({
        name: t.name,
        ...(t.description ? { description: t.description } : {}),
        implies: t.implies,
        conflicts: t.conflicts,
      })),
    };
  },

  async traits(db: Queryable): Promise<StoredTrait[]> {
    const { rows } = await db.query<TraitRow>(
      "SELECT name, description, implies, conflicts, updated_at, updated_by FROM policy_traits ORDER BY name",
    );
    return rows.map(toTrait);
  },

  async putTrait(tx: Queryable, def: TraitDefinition, by: ChangeAuthor): Promise<void> {
    await tx.query(
      `INSERT INTO policy_traits (name, description, implies, conflicts, updated_by)
       VALUES ($1, $2, $3::jsonb, $4::jsonb, $5)
       ON CONFLICT (name) DO UPDATE SET description = excluded.description,
         implies = excluded.implies, conflicts = excluded.conflicts,
         updated_by = excluded.updated_by, updated_at = now()`,
      [
        def.name,
        def.description ?? "",
        JSON.stringify(def.implies ?? []),
        JSON.stringify(def.conflicts ?? []),
        by.username,
      ],
    );
  },

  /** Removes a stored trait; false when there was none. */
  async deleteTrait(tx: Queryable, name: string): Promise<boolean> {
    const { rowCount } = await tx.query("DELETE FROM policy_traits WHERE name = $1", [name]);
    return rowCount > 0;
  },

  /** Stores a version unless it exists; true when it was created. */
  async putVersion(
    tx: Queryable,
    version: string,
    document: PolicyDocument,
    description: string,
    by: ChangeAuthor,
  ): Promise<boolean> {
    const { rowCount } = await tx.query(
      `INSERT INTO policy_versions (version, document, description, rule_count, created_by, created_by_user_id)
       VALUES ($1, $2::jsonb, $3, $4, $5, $6) ON CONFLICT (version) DO NOTHING`,
      [
        version,
        JSON.stringify(document),
        description,
        document.rules.length,
        by.username,
        by.userId,
      ],
    );
    return rowCount > 0;
  },

  async version(db: Queryable, version: string): Promise<StoredVersion | undefined> {
    const { rows } = await db.query<VersionRow>(
      `SELECT ${versionColumns} FROM policy_versions WHERE version = $1`,
      [version],
    );
    return rows[0] === undefined ? undefined : toVersion(rows[0]);
  },

  async document(db: Queryable, version: string): Promise<PolicyDocument | undefined> {
    const { rows } = await db.query<{ document: PolicyDocument }>(
      "SELECT document FROM policy_versions WHERE version = $1",
      [version],
    );
    return rows[0]?.document;
  },

  async versions(
    db: Queryable,
    page: { limit: number; beforeSeq: number | undefined },
  ): Promise<StoredVersion[]> {
    const { rows } = await db.query<VersionRow>(
      `SELECT ${versionColumns} FROM policy_versions
        WHERE ($1::bigint IS NULL OR seq < $1) ORDER BY seq DESC LIMIT $2`,
      [page.beforeSeq ?? null, page.limit],
    );
    return rows.map(toVersion);
  },

  /** Records an activation and moves the pointer (inside the caller's locked transaction). */
  async activate(
    tx: Queryable,
    version: string,
    previous: string | undefined,
    by: ChangeAuthor,
  ): Promise<number> {
    await tx.query(
      `INSERT INTO policy_activations (version, previous_version, activated_by, activated_by_user_id, request_id)
       VALUES ($1, $2, $3, $4, $5)`,
      [version, previous ?? null, by.username, by.userId, by.requestId],
    );
    const { rows } = await tx.query<{ generation: string }>(
      "UPDATE policy_state SET active_version = $1, generation = generation + 1 RETURNING generation",
      [version],
    );
    return Number(rows[0]?.generation);
  },

  /** Raises the generation (a registry change) and tells every process at commit. */
  async bump(tx: Queryable): Promise<number> {
    const { rows } = await tx.query<{ generation: string }>(
      "UPDATE policy_state SET generation = generation + 1 RETURNING generation",
    );
    return Number(rows[0]?.generation);
  },

  async notify(tx: Queryable, generation: number): Promise<void> {
    await tx.query("SELECT pg_notify($1, $2)", [policyChannel, String(generation)]);
  },

  async activations(
    db: Queryable,
    page: { limit: number; beforeSeq: number | undefined },
  ): Promise<StoredActivation[]> {
    const { rows } = await db.query<{
      seq: string;
      version: string;
      previous_version: string | null;
      activated_at: Date | string;
      activated_by: string;
      activated_by_user_id: string | null;
      request_id: string | null;
    }>(
      `SELECT seq, version, previous_version, activated_at, activated_by, activated_by_user_id, request_id
         FROM policy_activations WHERE ($1::bigint IS NULL OR seq < $1) ORDER BY seq DESC LIMIT $2`,
      [page.beforeSeq ?? null, page.limit],
    );
    return rows.map((r) => ({
      seq: Number(r.seq),
      version: r.version,
      previousVersion: r.previous_version ?? "",
      activatedAt: new Date(r.activated_at),
      activatedBy: r.activated_by,
      activatedByUserId: r.activated_by_user_id ?? "",
      requestId: r.request_id ?? "",
    }));
  },
};
