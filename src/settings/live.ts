import type { Logger } from "../log.js";
import { followChanges } from "../storage/follow.js";
import type { Database } from "../storage/index.js";
import type { EffectiveSettings } from "./effective.js";
import { settingsChannel } from "./settings-store.js";

/**
 * The settings this process runs with, kept current without a restart: every update
 * sends a notification at commit (LISTEN/NOTIFY, src/storage/notify.ts) that makes every
 * process sharing the database re-read them at once; a poll of the version is the safety
 * net for notifications lost while a listening connection was down.
 */
export interface LiveSettings {
  /** The latest effective settings (secrets in clear: never send them anywhere). */
  current(): EffectiveSettings;
  /**
   * Calls listener after each change, with the keys whose effective value changed.
   * Returns the function that unsubscribes. A listener that throws is logged and kept.
   */
  subscribe(listener: SettingsListener): () => void;
  /** Re-reads the settings if their version moved; resolves once applied. */
  refresh(): Promise<void>;
  close(): Promise<void>;
}

export type SettingsListener = (settings: EffectiveSettings, changed: readonly string[]) => void;

export interface LiveSettingsDeps {
  db: Pick<Database, "listen">;
  /** The effective settings, read from the database. */
  load(): Promise<EffectiveSettings>;
  /** The stored version, read from the database (cheap; polled). */
  version(): Promise<number>;
  log: Logger;
  /** How often the version is polled (default 5 s). */
  pollIntervalMs?: number;
}

export const defaultPollIntervalMs = 5_000;

/** Loads the settings, then keeps them current until `close`. */
export async function startLiveSettings(deps: LiveSettingsDeps): Promise<LiveSettings> {
  const { log } = deps;
  let current = await deps.load();
  const listeners = new Set<SettingsListener>();

  function publish(next: EffectiveSettings): void {
    const changed = Object.keys(next.values).filter(
      (key) => next.values[key] !== current.values[key],
    );
    current = next;
    if (changed.length === 0) return;
    log.info({ version: next.version, changed }, "settings applied");
    for (const listener of listeners) {
      try {
        listener(next, changed);
      } catch (err) {
        log.error({ err, changed }, "a settings listener failed");
      }
    }
  }

  async function reload(): Promise<void> {
    const version = await deps.version();
    if (version === current.version) return;
    const next = await deps.load();
    // Two reloads may overlap across processes' notifications: never go back.
    if (next.version > current.version) publish(next);
  }

  const follower = await followChanges({
    db: deps.db,
    channel: settingsChannel,
    what: "settings",
    reload,
    pollIntervalMs: deps.pollIntervalMs ?? defaultPollIntervalMs,
    log,
    failureMessage: "settings could not be reloaded; retrying",
    failureLevel: "warn",
  });

  return {
    current: () => current,
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    refresh: follower.refresh,
    close: follower.close,
  };
}
