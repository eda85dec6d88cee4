import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import type { EffectiveSettings } from "../../src/settings/effective.js";
import { startLiveSettings } from "../../src/settings/live.js";
import type { ListenHandlers } from "../../src/storage/index.js";

/** Live settings against a fake database: notifications, the poll, listeners. */

function fakeStore() {
  const state = { version: 0, level: "info" };
  const snapshot = (): EffectiveSettings => ({
    version: state.version,
    values: { log_level: state.level },
    sources: { log_level: "database" },
    lastUpdate: undefined,
  });
  return {
    state,
    load: async () => snapshot(),
    version: async () => state.version,
  };
}

const until = async (check: () => boolean) => {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
};

describe("live settings", () => {
  it("re-reads on a notification and tells subscribers which keys changed", async () => {
    const store = fakeStore();
    let handlers: ListenHandlers | undefined;
    const live = await startLiveSettings({
      db: {
        listen: async (_channel, h) => {
          handlers = h;
          return { close: async () => {} };
        },
      },
      ...store,
      log: silentLogger,
      pollIntervalMs: 60_000,
    });
    const seen: string[][] = [];
    live.subscribe(() => {
      throw new Error("a broken listener");
    });
    const stop = live.subscribe((_, changed) => seen.push([...changed]));
    store.state.version = 1;
    store.state.level = "debug";
    handlers?.onNotification("1");
    await until(() => live.current().values.log_level === "debug");
    expect(seen).toEqual([["log_level"]]);
    stop();
    store.state.version = 2;
    store.state.level = "warn";
    handlers?.onReconnect?.();
    await until(() => live.current().version === 2);
    expect(seen).toHaveLength(1);
    await live.close();
  });

  it("falls back to polling the version when it cannot listen", async () => {
    const store = fakeStore();
    const live = await startLiveSettings({
      db: {
        listen: async () => {
          throw new Error("no LISTEN here");
        },
      },
      ...store,
      log: silentLogger,
      pollIntervalMs: 20,
    });
    store.state.version = 3;
    store.state.level = "warn";
    await until(() => live.current().values.log_level === "warn");
    await live.close();
  });
});
