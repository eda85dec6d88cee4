import { logLevels } from "../config.js";
import type { Logger } from "../log.js";
import type { LiveSettings } from "./live.js";

const isLogLevel = (value: unknown): value is (typeof logLevels)[number] =>
  typeof value === "string" && (logLevels as readonly string[]).includes(value);

/**
 * Makes the root logger follow the `log_level` setting, now and after every change, on
 * this process (child loggers follow their root). Returns the function that stops it.
 */
export function followLogLevel(log: Logger, live: LiveSettings): () => void {
  const apply = (level: unknown) => {
    if (!isLogLevel(level) || log.level === level) return false;
    log.level = level;
    return true;
  };
  apply(live.current().values.log_level);
  return live.subscribe((settings, changed) => {
    if (!changed.includes("log_level")) return;
    if (apply(settings.values.log_level)) {
      log.info({ log_level: settings.values.log_level }, "log level changed");
    }
  });
}
