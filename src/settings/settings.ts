import { requestFields } from "../audit/event.js";
import type { AuditEventInput, AuditWriter, RequestOrigin } from "../audit/index.js";
import { type SecretBox, SecretBoxError } from "../crypto/secret-box.js";
import { DomainError, invalidArgument } from "../errors.js";
import type { Logger } from "../log.js";
import type { Database } from "../storage/index.js";
import {
  type EffectiveSettings,
  openStored,
  resolveSettings,
  type SettingSource,
  sealContext,
} from "./effective.js";
import { containsMask, isMaskedEcho, maskSecret, secretMask } from "./mask.js";
import {
  definitionOf,
  type SettingDefinition,
  type SettingValue,
  settingDefinitions,
} from "./registry.js";
import {
  type HistoryValue,
  type NewUpdate,
  type SettingsUpdateRecord,
  type StoredSettings,
  settingsStore,
} from "./settings-store.js";
import { type Bad, invalidSettings, maxReportedKeys, shown, validateUpdate } from "./validation.js";

/**
 * The settings area's domain: read, validate and change settings (all or none, under a
 * version), keep their history, and audit every write, refused ones included. The auth
 * interceptor has checked roles and API key scopes before any of this runs
 * (src/settings/service.ts). No transport types here.
 */

export interface SettingsActor {
  /** "system": the command line or the demo setup, acting for the operator. */
  kind: "user" | "service" | "system";
  userId: string;
  username: string;
  /** The API key presented with the call. */
  apiKeyId: string | undefined;
}

export interface SettingsRequestMeta {
  requestId: string;
  /** Where the request came from (absent outside a request). */
  origin?: RequestOrigin | undefined;
}

/** Settings as clients see them: secrets masked. */
export interface SettingsView {
  settings: Record<string, SettingValue>;
  sources: Record<string, SettingSource>;
  version: number;
  lastUpdate: EffectiveSettings["lastUpdate"];
}

export interface UpdateSettingsInput {
  /** Keys to new values; null removes the stored value. */
  values: Readonly<Record<string, unknown>>;
  /** Apply only at this version (If-Match). */
  expectedVersion?: number | undefined;
}

export interface UpdateOutcome extends SettingsView {
  changed: string[];
  restartRequired: string[];
}

export interface HistoryPage {
  updates: SettingsUpdateRecord[];
  nextPageToken: string;
}

export interface Settings {
  get(): Promise<SettingsView>;
  update(
    actor: SettingsActor,
    meta: SettingsRequestMeta,
    input: UpdateSettingsInput,
  ): Promise<UpdateOutcome>;
  /** Records a write the transport refused before it reached `update` (e.g. a bad If-Match). */
  refuse(
    actor: SettingsActor,
    meta: SettingsRequestMeta,
    err: DomainError,
    values: Readonly<Record<string, unknown>>,
  ): Promise<never>;
  definitions(): readonly SettingDefinition[];
  history(input: { pageSize?: number; pageToken?: string; key?: string }): Promise<HistoryPage>;
  /** The effective settings, read from the database now. */
  load(): Promise<EffectiveSettings>;
  /** The stored version, read from the database now. */
  version(): Promise<number>;
}

export interface SettingsDeps {
  db: Database;
  box: SecretBox;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  /** The environment's values (src/settings/effective.ts). */
  environment: ReadonlyMap<string, SettingValue>;
  log: Logger;
  /** Called after an update committed, before the answer (the process applies it at once). */
  committed?: () => Promise<void>;
}

export const defaultHistoryPageSize = 50;

/** The history's view of a value: secrets as "****", nothing stored as null. */
const historyValue = (def: SettingDefinition, value: SettingValue | undefined): HistoryValue =>
  value === undefined ? null : def.secret ? secretMask : value;

export function createSettings(deps: SettingsDeps): Settings {
  // Every wait for the database is bounded by the handle itself (DB_ACQUIRE_TIMEOUT_MS,
  // DB_STATEMENT_TIMEOUT_MS): a statement that gets no answer fails, and its transaction
  // is rolled back with it (only a COMMIT already sent may still apply when it resumes).
  const { db, box, audit, environment, log } = deps;

  const resolve = (stored: StoredSettings) => resolveSettings(stored, environment, box, log);

  function view(effective: EffectiveSettings): SettingsView {
    const settings: Record<string, SettingValue> = {};
    for (const def of settingDefinitions) {
      const value = effective.values[def.key] ?? def.default;
      settings[def.key] = def.secret ? maskSecret(String(value)) : value;
    }
    return {
      settings,
      sources: { ...effective.sources },
      version: effective.version,
      lastUpdate: effective.lastUpdate,
    };
  }

  /** A refused write, committed to the audit log before the refusal is answered. */
  async function refused(
    actor: SettingsActor,
    meta: SettingsRequestMeta,
    err: DomainError,
    details: Record<string, unknown>,
  ): Promise<never> {
    await audit.write(auditEvent(actor, meta, "failure", { reason: err.reason, ...details }));
    throw err;
  }

  async function apply(
    actor: SettingsActor,
    meta: SettingsRequestMeta,
    accepted: Map<string, SettingValue | null>,
    expectedVersion: number | undefined,
  ) {
    return db.transaction(async (tx) => {
      const stored = await settingsStore.read(tx, true);
      if (expectedVersion !== undefined && expectedVersion !== stored.version) {
        throw new DomainError(
          "aborted",
          "VERSION_MISMATCH",
          `the settings are at version ${stored.version}, not ${expectedVersion}: read them again`,
          {
            metadata: {
              current_version: String(stored.version),
              expected_version: String(expectedVersion),
            },
          },
        );
      }
      const before = resolve(stored);
      const writes: NewUpdate["writes"] = [];
      const changes: NewUpdate["changes"] = [];
      const masked: Bad[] = [];
      for (const def of settingDefinitions) {
        if (!accepted.has(def.key)) continue;
        const next = accepted.get(def.key) ?? null;
        const saved = stored.values.get(def.key);
        const current = saved === undefined ? undefined : openedOrNothing(box, def.key, saved);
        if (def.secret && typeof next === "string") {
          const effective = String(before.values[def.key] ?? "");
          if (isMaskedEcho(next, effective)) continue; // the masked value, sent back unchanged
          if (containsMask(next)) {
            masked.push({
              key: def.key,
              problem: "MASKED_VALUE",
              message: "holds the mask ****: send the whole new value to change a secret",
            });
            continue;
          }
        }
        if ((next ?? undefined) === current) continue;
        writes.push({
          key: def.key,
          stored:
            next === null
              ? undefined
              : def.secret
                ? { kind: "sealed", sealed: box.seal(String(next), sealContext(def.key)) }
                : { kind: "plain", value: next },
        });
        changes.push({
          key: def.key,
          before: historyValue(def, current),
          after: historyValue(def, next ?? undefined),
        });
      }
      if (masked.length > 0) throw invalidSettings(masked);
      const version = writes.length === 0 ? stored.version : stored.version + 1;
      if (writes.length > 0) {
        await settingsStore.write(tx, {
          version,
          userId: actor.userId,
          username: actor.username,
          requestId: meta.requestId,
          writes,
          changes,
        });
      }
      // The update and its event commit together: an event that cannot be written rolls
      // the update back (503 AUDIT_UNAVAILABLE).
      const changed = changes.map((c) => c.key);
      await audit.writeIn(
        tx,
        auditEvent(actor, meta, "success", {
          version,
          changed,
          changes,
          restart_required: changed.filter((key) => definitionOf(key)?.restartRequired),
        }),
      );
      return { version, changes };
    });
  }

  async function load(): Promise<EffectiveSettings> {
    return resolve(await settingsStore.read(db));
  }

  return {
    get: async () => view(await load()),

    async update(actor, meta, input) {
      const attempted = Object.keys(input.values).slice(0, maxReportedKeys).map(shown);
      let accepted: Map<string, SettingValue | null>;
      try {
        accepted = validateUpdate(input.values);
      } catch (err) {
        if (!(err instanceof DomainError)) throw err;
        return refused(actor, meta, err, {
          keys: attempted,
          problems: err.metadata.problems?.split(",") ?? [],
        });
      }
      let result: Awaited<ReturnType<typeof apply>>;
      try {
        result = await apply(actor, meta, accepted, input.expectedVersion);
      } catch (err) {
        if (
          err instanceof DomainError &&
          (err.kind === "aborted" || err.kind === "invalid_argument")
        ) {
          return refused(actor, meta, err, {
            keys: attempted,
            ...(err.kind === "aborted"
              ? {
                  expected_version: input.expectedVersion,
                  current_version: Number(err.metadata.current_version),
                }
              : { problems: err.metadata.problems?.split(",") ?? [] }),
          });
        }
        throw err;
      }
      const changed = result.changes.map((c) => c.key);
      const restartRequired = changed.filter((key) => definitionOf(key)?.restartRequired);
      if (changed.length > 0) {
        await deps.committed?.().catch((err: unknown) => {
          // Committed and audited: other processes and the poll pick it up regardless.
          log.warn({ error: (err as Error).message }, "settings not reloaded after an update");
        });
      }
      return { ...view(await load()), changed, restartRequired };
    },

    refuse: (actor, meta, err, values) =>
      refused(actor, meta, err, {
        keys: Object.keys(values).slice(0, maxReportedKeys).map(shown),
        field: err.field,
      }),

    definitions: () => settingDefinitions,

    async history(input) {
      const limit = input.pageSize || defaultHistoryPageSize;
      if (input.key && definitionOf(input.key) === undefined) {
        throw invalidArgument("INVALID_FIELD", "key names no setting", { field: "key" });
      }
      let beforeVersion: number | undefined;
      if (input.pageToken) {
        if (!/^[1-9][0-9]{0,14}$/.test(input.pageToken)) {
          throw invalidArgument(
            "INVALID_PAGE_TOKEN",
            "page_token is not a token this service issued",
            {
              field: "page_token",
            },
          );
        }
        beforeVersion = Number(input.pageToken);
      }
      const updates = await settingsStore.history(db, {
        limit: limit + 1,
        beforeVersion,
        key: input.key || undefined,
      });
      const page = updates.slice(0, limit);
      const last = page.at(-1);
      return {
        updates: page,
        nextPageToken: updates.length > limit && last ? String(last.version) : "",
      };
    },

    load,

    version: () => settingsStore.version(db),
  };
}

function auditEvent(
  actor: SettingsActor,
  meta: SettingsRequestMeta,
  outcome: "success" | "failure",
  details: Record<string, unknown>,
): AuditEventInput {
  return {
    actorType: actor.kind,
    actorId: actor.kind === "system" ? null : actor.userId,
    action: "settings_update",
    target: "settings",
    outcome,
    ...requestFields(meta),
    details: { api_key_id: actor.apiKeyId ?? null, ...details },
  };
}

/**
 * A stored value, or undefined when it is sealed under a key this process lacks: then any
 * update (a new value, or null) replaces it, which is how an admin recovers the setting.
 */
function openedOrNothing(
  box: SecretBox,
  key: string,
  saved: Parameters<typeof openStored>[2],
): ReturnType<typeof openStored> | undefined {
  try {
    return openStored(box, key, saved);
  } catch (err) {
    if (err instanceof SecretBoxError) return undefined;
    throw err;
  }
}
