import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import { invalidArgument, unavailable } from "../errors.js";
import { classifyAddress, parseHost } from "./host-address.js";
import type { HostResolver } from "./host-policy.js";

/**
 * A plugin must not point at the core itself: a manifest whose host and port are the core's
 * own listening address would have the gateway forward calls, with the plugin's core secret,
 * back into the core (and the plugin, started on that port, could never listen). Registration
 * and updates refuse it, and the gateway refuses to dial it (a name can resolve elsewhere
 * later, and a stored manifest can name a port the core bound since; docs/operator-lane.md,
 * "Manifests and the SSRF stance").
 */

/**
 * Where the core listens: the address its listener is bound to (the platform gives the IP the
 * socket reports; a name is resolved) and the port it bound.
 */
export interface CoreListener {
  host: string;
  port: number;
}

/** The machine's own interface addresses (a core on the any-address answers on each). */
const localAddresses = (): string[] =>
  Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address));

const canonical = (address: string): string | undefined => {
  const host = parseHost(address.split("%")[0] ?? "");
  return host?.kind === "ip" ? host.address : undefined;
};

/**
 * Would a connection to `address` reach a core listening on `listen` (an IP address)? The
 * same address does; on the any-address (`0.0.0.0` IPv4 only, `::` both families) so do every
 * loopback and unspecified address and the machine's own interface addresses.
 */
export function reachesListener(address: string, listen: string, own: readonly string[]): boolean {
  const dialled = canonical(address);
  const listening = canonical(listen);
  if (dialled === undefined || listening === undefined) return false;
  if (dialled === listening) return true;
  if (classifyAddress(listening) !== "unspecified") return false;
  if (listening !== "::" && isIP(dialled) !== 4) return false;
  const cls = classifyAddress(dialled);
  return cls === "loopback" || cls === "unspecified" || own.some((a) => canonical(a) === dialled);
}

/**
 * The addresses the core listens on: its host as an address, or what the name resolves to;
 * undefined when the name does not resolve (then nobody can tell what reaches the core, and
 * the checks refuse rather than let a dial through: fail closed).
 */
function listenAddresses(
  host: string,
  resolve: HostResolver,
): string[] | Promise<string[] | undefined> {
  const listenHost = host.trim() || "0.0.0.0";
  if (isIP(canonical(listenHost) ?? "")) return [listenHost];
  return resolve(listenHost).then(
    (found) => (found.length > 0 ? found : undefined),
    () => undefined,
  );
}

/**
 * The registration check: throws invalid_argument PLUGIN_IS_CORE naming `manifest.port` when
 * one of the addresses the manifest's host is (or resolves to), on the manifest's port, is the
 * core's own listener. Before the core listens (no listener yet) nothing is refused. When the
 * listener's own name does not resolve, a manifest on its port is refused with 503
 * CORE_ADDRESS_UNKNOWN (try again), not taken.
 */
export function createCoreAddressCheck(options: {
  listener: () => CoreListener | undefined;
  resolve: HostResolver;
  /** The machine's interface addresses (default: os.networkInterfaces()). */
  interfaces?: () => string[];
}) {
  const interfaces = options.interfaces ?? localAddresses;
  return async (host: string, addresses: readonly string[], port: number): Promise<void> => {
    const core = options.listener();
    if (core === undefined || core.port !== port || addresses.length === 0) return;
    const listens = await listenAddresses(core.host, options.resolve);
    if (listens === undefined) {
      throw unavailable(
        "CORE_ADDRESS_UNKNOWN",
        "the core's own listening address cannot be worked out now (its host does not resolve), " +
          "so a manifest on its port cannot be checked; try again",
        { retryAfterSeconds: 1 },
      );
    }
    const own = interfaces();
    const hit = addresses.find((a) => listens.some((l) => reachesListener(a, l, own)));
    if (hit === undefined) return;
    throw invalidArgument(
      "PLUGIN_IS_CORE",
      `manifest.host ${host} and manifest.port ${port} are this core's own listening address; ` +
        "a plugin must listen on an address and port of its own (e.g. PORT=8081)",
      { field: "manifest.port", metadata: { host, port: String(port), address: hit } },
    );
  };
}

/**
 * The dial-time check: the first of `addresses` (what the gateway is about to dial, resolved)
 * that, on `port`, reaches the core's own listener; undefined when none does, or the core
 * does not listen yet. While the listener's own name does not resolve, every address on its
 * port counts as reaching it (fail closed). A promise only while the listener's addresses are
 * being worked out (once per listener, when its host is a name); otherwise an answer at once.
 */
export type CoreDialCheck = (
  addresses: readonly string[],
  port: number,
) => string | undefined | Promise<string | undefined>;

/**
 * The gateway hop is a hot path: a dial on another port than the core's costs one
 * comparison. The listener's addresses are worked out once per listener (host and port), the
 * interface addresses at most every `interfacesTtlMs` and only for dials on the core's port,
 * and each dialled address's answer is remembered until then.
 */
export function createCoreDialCheck(options: {
  listener: () => CoreListener | undefined;
  resolve: HostResolver;
  /** The machine's interface addresses (default: os.networkInterfaces()). */
  interfaces?: () => string[];
  /** How long the interface addresses are taken as read (default 10 s). */
  interfacesTtlMs?: number;
  now?: () => number;
}): CoreDialCheck {
  const interfaces = options.interfaces ?? localAddresses;
  const ttlMs = options.interfacesTtlMs ?? 10_000;
  const now = options.now ?? (() => performance.now());

  interface Known {
    host: string;
    port: number;
    /** undefined: the listener's name did not resolve, and every dial on its port is refused. */
    listens: readonly string[] | undefined;
    own: readonly string[];
    ownAt: number;
    /** Dialled address → does it reach the listener (with `own` as read at `ownAt`). */
    hits: Map<string, boolean>;
  }
  let known: Known | undefined;
  let pending: { host: string; port: number; ready: Promise<Known> } | undefined;

  const knownOf = (core: CoreListener, listens: readonly string[] | undefined): Known => {
    const state = { ...core, listens, own: interfaces(), ownAt: now(), hits: new Map() };
    // A name that did not resolve (a DNS failure) is asked again at the next dial on the
    // core's port; until then those dials are refused.
    if (listens !== undefined) known = state;
    return state;
  };

  function prepare(core: CoreListener): Known | Promise<Known> {
    const listens = listenAddresses(core.host, options.resolve);
    if (Array.isArray(listens)) return knownOf(core, listens);
    if (pending?.host === core.host && pending.port === core.port) return pending.ready;
    const ready = listens.then((found) => {
      if (pending?.ready === ready) pending = undefined;
      return knownOf(core, found);
    });
    pending = { host: core.host, port: core.port, ready };
    return ready;
  }

  function firstHit(state: Known, addresses: readonly string[]): string | undefined {
    const { listens } = state;
    if (listens === undefined) return addresses[0];
    if (now() - state.ownAt > ttlMs) {
      state.own = interfaces();
      state.ownAt = now();
      state.hits.clear();
    }
    for (const address of addresses) {
      let hit = state.hits.get(address);
      if (hit === undefined) {
        hit = listens.some((l) => reachesListener(address, l, state.own));
        if (state.hits.size >= 1024) state.hits.clear();
        state.hits.set(address, hit);
      }
      if (hit) return address;
    }
    return undefined;
  }

  return (addresses, port) => {
    const core = options.listener();
    if (core === undefined || core.port !== port || addresses.length === 0) return undefined;
    const state =
      known !== undefined && known.host === core.host && known.port === core.port
        ? known
        : prepare(core);
    return state instanceof Promise
      ? state.then((s) => firstHit(s, addresses))
      : firstHit(state, addresses);
  };
}
