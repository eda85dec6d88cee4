import { SettingsService } from "../../gen/traitgate/settings/v1/settings_pb.js";
import type { AuditWriter } from "../audit/index.js";
import type { Config } from "../config.js";
import { createSecretBox, type DataKeys } from "../crypto/secret-box.js";
import type { Logger } from "../log.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Database } from "../storage/index.js";
import { environmentValues } from "./effective.js";
import { type LiveSettings, startLiveSettings } from "./live.js";
import { createSettingsService } from "./service.js";
import { createSettings, type Settings } from "./settings.js";

/** API key scopes of the settings area. */
export const settingsReadScope = "settings:read";
export const settingsWriteScope = "settings:write";

const read = requireAuth({ roles: ["admin", "auditor"], apiKeyScopes: [settingsReadScope] });
const write = requireAuth({ roles: ["admin"], apiKeyScopes: [settingsWriteScope] });

/** How each method of SettingsService is protected (also read by the OpenAPI generator). */
export const settingsAuthRules: ReadonlyMap<string, AuthRule> = new Map(
  SettingsService.methods.map((m) => [
    `${SettingsService.typeName}/${m.name}`,
    m.name === "UpdateSettings" ? write : read,
  ]),
);

export interface SettingsModuleDeps {
  db: Database;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  /** Keys that seal secret settings at rest. */
  dataKeys: DataKeys;
  /** The validated configuration and the environment it came from: the defaults' source. */
  config: Config;
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** Version poll behind LISTEN/NOTIFY (default 5 s). */
  pollIntervalMs?: number;
}

/**
 * Wires the settings area: reading needs the role admin or auditor and the key scope
 * settings:read; writing needs the role admin and settings:write. The returned `live`
 * settings are what the process runs with; subscribe to apply changes (src/platform.ts).
 */
export async function createSettingsModule(
  deps: SettingsModuleDeps,
): Promise<{ module: ServiceModule; settings: Settings; live: LiveSettings }> {
  const log = deps.log.child({ area: "settings" });
  let live: LiveSettings | undefined;
  const settings = createSettings({
    db: deps.db,
    box: createSecretBox(deps.dataKeys),
    audit: deps.audit,
    environment: environmentValues(deps.config, deps.env),
    log,
    committed: () => live?.refresh() ?? Promise.resolve(),
  });
  live = await startLiveSettings({
    db: deps.db,
    load: settings.load,
    version: settings.version,
    log,
    ...(deps.pollIntervalMs ? { pollIntervalMs: deps.pollIntervalMs } : {}),
  });
  const service = createSettingsService(settings);
  return {
    settings,
    live,
    module: {
      services: [SettingsService],
      register: (router) => router.service(SettingsService, service),
      authRules: settingsAuthRules,
    },
  };
}

export { SettingsService };
