import type { Logger } from "../log.js";
import type { Database, NotificationSubscription } from "../storage/index.js";
import type { PolicyEngine } from "./engine.js";
import { policyChannel } from "./policy-store.js";

/**
 * The compiled engine this process answers with, kept current without a restart: every
 * activation and registry change raises the stored generation and sends a notification at
 * commit (LISTEN/NOTIFY, src/storage/notify.ts), on which every process sharing the
 * database re-reads and recompiles; a poll of the generation is the safety net for
 * notifications lost while a listening connection was down.
 *
 * The swap is one assignment: a decision in progress finishes on the engine it started
 * with, the next one uses the new engine. A generation that fails to compile (it cannot,
 * once validated, but the database is not ours alone) leaves the previous engine answering.
 */
export interface LivePolicy {
  /** The active compiled engine: evaluate in process with it (the gateway does). */
  current(): PolicyEngine;
  /** The generation the current engine was built from. */
  generation(): number;
  /** Re-reads if the stored generation moved; resolves once applied. */
  refresh(): Promise<void>;
  /** Installs an engine this process compiled for a generation it just committed. */
  install(engine: PolicyEngine, generation: number): void;
  close(): Promise<void>;
}

export interface LoadedPolicy {
  generation: number;
  engine: PolicyEngine;
}

export interface LivePolicyDeps {
  db: Pick<Database, "listen">;
  /** Reads the active version and the registry and compiles them. */
  load(): Promise<LoadedPolicy>;
  /** The stored generation (cheap; polled). */
  generation(): Promise<number>;
  log: Logger;
  /** How often the generation is polled (default 1 s). */
  pollIntervalMs?: number;
}

export const defaultPolicyPollIntervalMs = 1_000;

export async function startLivePolicy(deps: LivePolicyDeps): Promise<LivePolicy> {
  const { log } = deps;
  let current = await deps.load();
  let running: Promise<void> | undefined;
  let again = false;
  let failing = false;
  let closed = false;

  const install = (next: LoadedPolicy): void => {
    // Reloads may overlap across processes' notifications: never go back.
    if (next.generation <= current.generation) return;
    const before = current.engine.version;
    current = next;
    log.info(
      { generation: next.generation, version: next.engine.version, previous: before },
      "policy applied",
    );
  };

  async function reload(): Promise<void> {
    const generation = await deps.generation();
    if (generation <= current.generation) return;
    install(await deps.load());
  }

  /** One reload at a time; a request made meanwhile runs once more after it. */
  function refresh(): Promise<void> {
    if (running !== undefined) {
      again = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
          await reload();
        } while (again && !closed);
        if (failing) log.info("policy reload works again");
        failing = false;
      } finally {
        running = undefined;
      }
    })();
    return running;
  }

  /** Background refreshes log their first failure only, not one line per poll. */
  const background = () => {
    if (closed) return;
    refresh().catch((err: unknown) => {
      if (!failing) {
        log.error(
          { error: (err as Error).message, reason: (err as { reason?: string }).reason },
          "policy could not be reloaded; the previous version keeps answering",
        );
      }
      failing = true;
    });
  };

  let subscription: NotificationSubscription | undefined;
  try {
    subscription = await deps.db.listen(policyChannel, {
      onNotification: background,
      onReconnect: background,
    });
  } catch (err) {
    log.warn({ error: (err as Error).message }, "policy notifications unavailable; polling only");
  }
  const timer = setInterval(background, deps.pollIntervalMs ?? defaultPolicyPollIntervalMs);
  timer.unref();

  return {
    current: () => current.engine,
    generation: () => current.generation,
    refresh,
    install: (engine, generation) => install({ engine, generation }),
    async close() {
      closed = true;
      clearInterval(timer);
      await subscription?.close();
      await running?.catch(() => {});
    },
  };
}
