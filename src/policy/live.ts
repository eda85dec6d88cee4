import type { Logger } from "../log.js";
import { followChanges } from "../storage/follow.js";
import type { Database } from "../storage/index.js";
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

  const follower = await followChanges({
    db: deps.db,
    channel: policyChannel,
    what: "policy",
    reload,
    pollIntervalMs: deps.pollIntervalMs ?? defaultPolicyPollIntervalMs,
    log,
    failureMessage: "policy could not be reloaded; the previous version keeps answering",
    failureLevel: "error",
  });

  return {
    current: () => current.engine,
    generation: () => current.generation,
    refresh: follower.refresh,
    install: (engine, generation) => install({ engine, generation }),
    close: follower.close,
  };
}
