import type { Config } from "../config.js";
import { type SecretBox, SecretBoxError } from "../crypto/secret-box.js";
import type { Logger } from "../log.js";
import { checkValue, type SettingValue, settingDefinitions } from "./registry.js";
import type { StoredSettings, StoredValue } from "./settings-store.js";

/** Where an effective value comes from, highest precedence first: database, environment, default. */
export type SettingSource = "database" | "environment" | "default";

/** Every setting's value as the platform runs with it. Secrets are in clear: never send this. */
export interface EffectiveSettings {
  version: number;
  values: Readonly<Record<string, SettingValue>>;
  sources: Readonly<Record<string, SettingSource>>;
  lastUpdate: StoredSettings["lastUpdate"];
}

/**
 * The environment's values: for each setting with an environment variable that is set
 * (non-empty), the value the validated configuration holds for it.
 */
export function environmentValues(
  config: Config,
  env: NodeJS.ProcessEnv,
): Map<string, SettingValue> {
  const values = new Map<string, SettingValue>();
  for (const def of settingDefinitions) {
    if (def.env === undefined) continue;
    const raw = env[def.env.variable];
    if (raw !== undefined && raw.trim() !== "") values.set(def.key, def.env.fromConfig(config));
  }
  return values;
}

/** The secret box context of a secret setting's sealed value: a value moved to another key does not open. */
export const sealContext = (key: string): string => `settings:${key}`;

/** A stored value in clear (secrets opened). */
export function openStored(box: SecretBox, key: string, stored: StoredValue): SettingValue {
  return stored.kind === "plain" ? stored.value : box.openString(stored.sealed, sealContext(key));
}

/**
 * The effective settings: stored values over environment values over defaults. A stored
 * value the registry no longer accepts (a narrower range after an upgrade) is skipped,
 * with a warning naming the key.
 */
export function resolveSettings(
  stored: StoredSettings,
  environment: ReadonlyMap<string, SettingValue>,
  box: SecretBox,
  log: Logger,
): EffectiveSettings {
  const values: Record<string, SettingValue> = {};
  const sources: Record<string, SettingSource> = {};
  for (const def of settingDefinitions) {
    const saved = stored.values.get(def.key);
    if (saved !== undefined) {
      let opened: unknown;
      try {
        opened = openStored(box, def.key, saved);
      } catch (err) {
        // A secret sealed under a key this process lacks must not stop the platform (nor
        // the admin who sets it again): the key falls back, loudly, to env or default.
        if (!(err instanceof SecretBoxError)) throw err;
        log.error(
          { key: def.key, reason: err.reason },
          "stored secret setting cannot be opened (data key missing?): ignored until set again",
        );
        opened = undefined;
      }
      const checked =
        opened === undefined
          ? { ok: false as const, problem: "sealed value cannot be opened" }
          : checkValue(def, opened);
      if (checked.ok) {
        values[def.key] = checked.value;
        sources[def.key] = "database";
        continue;
      }
      log.warn({ key: def.key, problem: checked.problem }, "stored setting ignored: not valid now");
    }
    const fromEnv = environment.get(def.key);
    if (fromEnv !== undefined) {
      values[def.key] = fromEnv;
      sources[def.key] = "environment";
    } else {
      values[def.key] = def.default;
      sources[def.key] = "default";
    }
  }
  return { version: stored.version, values, sources, lastUpdate: stored.lastUpdate };
}
