import { createLimiter } from "../limiter.js";
import type { Forwarder } from "./forwarder.js";
import type { PluginManifest } from "./manifest.js";

/**
 * Whether registered plugins answer (docs/operator-lane.md, "Reachability"): `GET /healthz`
 * on the manifest's host and port, over the gateway's own forwarder, so through the same
 * connect guard as every gateway call (an address plugins may not be reached at is never
 * dialled). No secret is sent: the health endpoint must not need one. No transport types.
 */

export type ReachabilityState = "reachable" | "unhealthy" | "unreachable" | "timeout" | "refused";

export interface PluginReachability {
  pluginId: string;
  state: ReachabilityState;
  /** The status the plugin answered; 0 when it did not answer. */
  httpStatus: number;
  /** Why it is not reachable (a socket error code, the refused address class). */
  detail: string;
  latencyMs: number;
  checkedAt: Date;
}

/** The path every plugin answers health checks on. */
export const pluginHealthPath = "/healthz";

export interface ReachabilityDeps {
  forwarder: Pick<Forwarder, "forward">;
  /** The registered plugins' manifests (enabled or not), or the one named (not_found if none). */
  manifests: (pluginId: string | undefined) => Promise<PluginManifest[]>;
  timeoutMs: number;
  now?: () => number;
  /** Plugins one check probes at once (default 16). */
  concurrency?: number;
}

export interface PluginReachabilityCheck {
  /** Checks every registered plugin, or only `pluginId`. */
  check(pluginId?: string, signal?: AbortSignal): Promise<PluginReachability[]>;
}

/** A health check waits at most this long, whatever the gateway's call timeout. */
const maxCheckMs = 2000;

/**
 * Probes in flight at once, per check: a registry of hundreds of plugins must not open a
 * connection to every plugin in the same instant. Per check, not shared: a check of one
 * plugin never waits behind another administrator's check of all of them.
 */
const defaultConcurrency = 16;

export function createPluginReachability(deps: ReachabilityDeps): PluginReachabilityCheck {
  const now = deps.now ?? (() => performance.now());
  const timeoutMs = Math.min(deps.timeoutMs, maxCheckMs);
  const concurrency = deps.concurrency ?? defaultConcurrency;

  async function probe(manifest: PluginManifest, signal?: AbortSignal) {
    const started = now();
    const result = await deps.forwarder.forward({
      method: "GET",
      host: manifest.host,
      port: manifest.port,
      path: pluginHealthPath,
      body: Buffer.alloc(0),
      headers: {},
      timeoutMs,
      ...(signal ? { signal } : {}),
    });
    const latencyMs = Math.round((now() - started) * 10) / 10;
    const base = { pluginId: manifest.id, latencyMs, checkedAt: new Date() };
    switch (result.kind) {
      case "reply":
        return {
          ...base,
          state: result.status >= 200 && result.status < 300 ? "reachable" : "unhealthy",
          httpStatus: result.status,
          detail: "",
        } as const;
      case "too_large":
        // It answered, with more than a health reply should be: reachable all the same.
        return { ...base, state: "reachable", httpStatus: 200, detail: "reply too large" } as const;
      case "refused":
        return { ...base, state: "refused", httpStatus: 0, detail: result.addressClass } as const;
      case "timeout":
        return {
          ...base,
          state: "timeout",
          httpStatus: 0,
          detail: `no answer in ${timeoutMs} ms`,
        } as const;
      case "unreachable":
        return { ...base, state: "unreachable", httpStatus: 0, detail: result.cause } as const;
      case "aborted":
        return { ...base, state: "unreachable", httpStatus: 0, detail: "check cancelled" } as const;
    }
  }

  return {
    async check(pluginId, signal) {
      const manifests = await deps.manifests(pluginId || undefined);
      // In order, at most `concurrency` at once; once the caller has left, the probes still
      // waiting answer "check cancelled" without dialling.
      const limiter = createLimiter(concurrency);
      return Promise.all(manifests.map((m) => limiter.run(() => probe(m, signal))));
    },
  };
}
