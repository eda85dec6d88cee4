import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import { invalidArgument } from "../errors.js";
import { classifyAddress, parseHost } from "./host-address.js";
import type { HostResolver } from "./host-policy.js";

/**
 * A plugin must not point at the core itself: a manifest whose host and port are the core's
 * own listening address would have the gateway forward calls, with the plugin's core secret,
 * back into the core (and the plugin, started on that port, could never listen). Registration
 * and updates refuse it (docs/operator-lane.md, "Manifests and the SSRF stance").
 */

/** Where the core listens: its HOST setting and the port it bound. */
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
 * The registration check: throws invalid_argument PLUGIN_IS_CORE naming `manifest.port` when
 * one of the addresses the manifest's host is (or resolves to), on the manifest's port, is the
 * core's own listener. Before the core listens (no listener yet) nothing is refused.
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
    const listenHost = core.host.trim() || "0.0.0.0";
    const listens = isIP(canonical(listenHost) ?? "")
      ? [listenHost]
      : await options.resolve(listenHost).catch(() => []);
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
