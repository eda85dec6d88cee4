import type { Queryable } from "../storage/index.js";
import type { SettingValue } from "./registry.js";

/** The channel every process listens on; the payload is the new version. */
export const settingsChannel = "traitgate_settings";

/** A value stored through the API: plain, or sealed when the setting is secret. */
export type StoredValue =
  | { kind: "plain"; value: SettingValue }
  | { kind: "sealed"; sealed: string };

export interface StoredSettings {
  version: number;
  values: Map<string, StoredValue>;
  /** The last update; undefined before the first. */
  lastUpdate: { at: Date; userId: string; username: string } | undefined;
}

/** A JSON value as the history keeps it (secrets already "****"); null = nothing stored. */
export type HistoryValue = SettingValue | null;

export interface SettingsUpdateRecord {
  version: number;
  at: Date;
  userId: string;
  username: string;
  requestId: string;
  changes: { key: string; before: HistoryValue; after: HistoryValue }[];
}

export interface NewUpdate {
  version: number;
  userId: string;
  username: string;
  requestId: string;
  /** New stored values; undefined removes the stored value. */
  writes: { key: string; stored: StoredValue | undefined }[];
  changes: { key: string; before: HistoryValue; after: HistoryValue }[];
}

interface SettingRow {
  key: string;
  value: SettingValue | null;
  sealed: string | null;
}

interface UpdateRow {
  version: string;
  updated_at: Date | string;
  user_id: string;
  username: string;
  request_id: string | null;
}

const toStored = (row: SettingRow): StoredValue | undefined =>
  row.sealed !== null
    ? { kind: "sealed", sealed: row.sealed }
    : row.value !== null
      ? { kind: "plain", value: row.value }
      : undefined;

const json = (value: HistoryValue): string | null =>
  value === null ? null : JSON.stringify(value);

/** SQL of the settings area (src/storage/migrations/0007_settings.sql). */
export const settingsStore = {
  async version(db: Queryable): Promise<number> {
    const { rows } = await db.query<{ version: string }>("SELECT version FROM settings_state");
    return Number(rows[0]?.version ?? 0);
  },

  /** Everything stored, read in one statement so that values and version agree. */
  async read(db: Queryable, lockForUpdate = false): Promise<StoredSettings> {
    const { rows } = await db.query<
      Partial<UpdateRow> & { version: string; entries: SettingRow[] | null }
    >(
      `SELECT s.version, u.updated_at, u.user_id, u.username,
              (SELECT json_agg(json_build_object('key', key, 'value', value, 'sealed', sealed))
                 FROM settings) AS entries
         FROM settings_state s LEFT JOIN settings_updates u ON u.version = s.version
         ${lockForUpdate ? "FOR UPDATE OF s" : ""}`,
    );
    const row = rows[0];
    if (row === undefined) throw new Error("settings_state has no row (migration 0007)");
    const values = new Map<string, StoredValue>();
    for (const entry of row.entries ?? []) {
      const stored = toStored(entry);
      if (stored !== undefined) values.set(entry.key, stored);
    }
    return {
      version: Number(row.version),
      values,
      lastUpdate:
        row.updated_at == null
          ? undefined
          : {
              at: new Date(row.updated_at),
              userId: row.user_id ?? "",
              username: row.username ?? "",
            },
    };
  },

  /** Writes an update (inside the caller's transaction, which holds the state row). */
  async write(tx: Queryable, update: NewUpdate): Promise<void> {
    for (const { key, stored } of update.writes) {
      if (stored === undefined) {
        await tx.query("DELETE FROM settings WHERE key = $1", [key]);
        continue;
      }
      await tx.query(
        `INSERT INTO settings (key, value, sealed, version) VALUES ($1, $2::jsonb, $3, $4)
         ON CONFLICT (key) DO UPDATE
           SET value = excluded.value, sealed = excluded.sealed, version = excluded.version`,
        [
          key,
          stored.kind === "plain" ? JSON.stringify(stored.value) : null,
          stored.kind === "sealed" ? stored.sealed : null,
          update.version,
        ],
      );
    }
    await tx.query("UPDATE settings_state SET version = $1", [update.version]);
    await tx.query(
      `INSERT INTO settings_updates (version, user_id, username, request_id)
       VALUES ($1, $2, $3, $4)`,
      [update.version, update.userId, update.username, update.requestId || null],
    );
    for (const change of update.changes) {
      await tx.query(
        `INSERT INTO settings_changes (version, key, before, after)
         VALUES ($1, $2, $3::jsonb, $4::jsonb)`,
        [update.version, change.key, json(change.before), json(change.after)],
      );
    }
    // Delivered at commit to every listening process (src/settings/live.ts).
    await tx.query("SELECT pg_notify($1, $2)", [settingsChannel, String(update.version)]);
  },

  /** Updates newest first, optionally only those that changed `key`, older than `beforeVersion`. */
  async history(
    db: Queryable,
    options: { limit: number; beforeVersion?: number | undefined; key?: string | undefined },
  ): Promise<SettingsUpdateRecord[]> {
    const { rows } = await db.query<UpdateRow>(
      `SELECT u.version, u.updated_at, u.user_id, u.username, u.request_id
         FROM settings_updates u
        WHERE ($1::bigint IS NULL OR u.version < $1)
          AND ($2::text IS NULL OR EXISTS (
                SELECT 1 FROM settings_changes c WHERE c.version = u.version AND c.key = $2))
        ORDER BY u.version DESC
        LIMIT $3`,
      [options.beforeVersion ?? null, options.key ?? null, options.limit],
    );
    if (rows.length === 0) return [];
    const versions = rows.map((r) => r.version);
    const changes = await db.query<{
      version: string;
      key: string;
      before: HistoryValue;
      after: HistoryValue;
    }>(
      `SELECT version, key, before, after FROM settings_changes
        WHERE version = ANY($1::bigint[]) ORDER BY version, key`,
      [versions],
    );
    return rows.map((r) => ({
      version: Number(r.version),
      at: new Date(r.updated_at),
      userId: r.user_id,
      username: r.username,
      requestId: r.request_id ?? "",
      changes: changes.rows
        .filter((c) => c.version === r.version)
        .map((c) => ({ key: c.key, before: c.before, after: c.after })),
    }));
  },
};
