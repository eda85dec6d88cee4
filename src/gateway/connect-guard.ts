import type { LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import type { CoreDialCheck } from "./core-address.js";
import { isMetadataName, parseHost } from "./host-address.js";
import type { HostPolicy, HostResolver } from "./host-policy.js";

/**
 * The forward-time half of the host policy: the address the gateway actually dials is
 * checked, whatever the name resolved to at registration (DNS can change in between). A
 * manifest's IP literal is checked before dialling (Node dials literals without a lookup);
 * a name goes through `lookup`, which resolves it, checks every address, and fails the
 * connection before any socket is opened when one is refused. An address that, on the port
 * dialled, is the core's own listener is refused too (class `core_listener`): the gateway
 * would send the plugin's core secret back into the core.
 */

/** The `code` of the error a refused lookup fails the connection with. */
export const addressRefusedCode = "ERR_PLUGIN_ADDRESS_REFUSED";

/** The class of an address refused because, on the port dialled, it is the core's own listener. */
export const coreListenerClass = "core_listener";

/**
 * A refused connection: the host, the port, the address it is or resolved to, and that
 * address's class.
 */
export interface Refusal {
  host: string;
  port: number;
  address: string;
  addressClass: string;
}

export type Target = { host: string } | { refused: string };

export interface ConnectGuard {
  /**
   * What to dial for a manifest's host (its canonical form) and port, or why nothing may be.
   * A promise only while the core's own listening addresses are being worked out.
   */
  target(host: string, port: number): Target | Promise<Target>;
  /**
   * For `http.request` to `port`: resolves a name, and refuses it when any address is
   * refused (Node does not tell a lookup the port: there is one function per port).
   */
  lookup(port: number): LookupFunction;
}

export function createConnectGuard(deps: {
  policy: Pick<HostPolicy, "dialRefusal">;
  resolve: HostResolver;
  /** Which of the addresses to dial, on a port, is the core's own listener (none if absent). */
  core?: CoreDialCheck;
  /** Told of every refusal (for the operator's log); never given payloads. */
  onRefused?: (refusal: Refusal) => void;
}): ConnectGuard {
  const refuse = (host: string, port: number, address: string, addressClass: string) => {
    deps.onRefused?.({ host, port, address, addressClass });
    return addressClass;
  };

  /**
   * What to dial for a manifest's host, whatever the port; the policy is fixed, so each host
   * is worked out once. `ip`: an address Node dials without a lookup.
   */
  function targetOf(
    text: string,
  ): { dial: { host: string }; ip: boolean } | { refused: string; host: string; address: string } {
    const refused = (host: string, address: string, addressClass: string) => ({
      refused: addressClass,
      host,
      address,
    });
    const host = parseHost(text);
    if (host === undefined) return refused(text, "", "invalid_host");
    if (host.kind === "name") {
      // Its addresses are checked by `lookup`, when it is dialled.
      return isMetadataName(host.name)
        ? refused(host.name, "", "metadata")
        : { dial: { host: host.name }, ip: false };
    }
    const refusal = deps.policy.dialRefusal(host.address, host.address);
    return refusal === undefined
      ? { dial: { host: host.address }, ip: true }
      : refused(host.address, host.address, refusal);
  }
  const targets = new Map<string, ReturnType<typeof targetOf>>();

  /** An IP literal that is the core's own listener on `port` is refused like a refused class. */
  const notCore = (target: { host: string }, port: number, hit: string | undefined): Target =>
    hit === undefined ? target : { refused: refuse(target.host, port, hit, coreListenerClass) };

  /** A name's addresses, or why it may not be dialled on `port` (the refusal already told). */
  async function resolveChecked(
    hostname: string,
    port: number,
  ): Promise<{ addresses: string[] } | { refused: string }> {
    const addresses = await deps.resolve(hostname);
    for (const address of addresses) {
      const refusal = deps.policy.dialRefusal(hostname, address);
      if (refusal !== undefined) return { refused: refuse(hostname, port, address, refusal) };
    }
    const hit = await deps.core?.(addresses, port);
    if (hit !== undefined) return { refused: refuse(hostname, port, hit, coreListenerClass) };
    return { addresses };
  }

  const lookups = new Map<number, LookupFunction>();
  const lookupFor =
    (port: number): LookupFunction =>
    (hostname, options, callback) => {
      resolveChecked(hostname, port).then(
        (checked) => {
          if ("refused" in checked) {
            const err: NodeJS.ErrnoException & { addressClass?: string } = new Error(
              checked.refused === coreListenerClass
                ? `${hostname} resolves to this core's own listening address on port ${port}`
                : `${hostname} resolves to an address plugins may not be reached at`,
            );
            err.code = addressRefusedCode;
            err.addressClass = checked.refused;
            callback(err, "");
            return;
          }
          const { addresses } = checked;
          const wanted = familyOf(options.family);
          const found: LookupAddress[] = addresses
            .map((address) => ({ address, family: isIP(address.split("%")[0] ?? "") }))
            .filter((a) => a.family !== 0 && (wanted === 0 || a.family === wanted));
          const first = found[0];
          if (first === undefined) {
            const err: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${hostname}`);
            err.code = "ENOTFOUND";
            callback(err, "");
          } else if (options.all) {
            callback(null, found);
          } else {
            callback(null, first.address, first.family);
          }
        },
        (err: NodeJS.ErrnoException) => callback(err, ""),
      );
    };

  return {
    target(text, port) {
      let target = targets.get(text);
      if (target === undefined) {
        if (targets.size >= 1024) targets.clear();
        target = targetOf(text);
        targets.set(text, target);
      }
      if ("refused" in target) {
        return { refused: refuse(target.host, port, target.address, target.refused) };
      }
      // A name's addresses are checked, the core's listener included, by its lookup.
      const dialled = target.dial;
      if (!target.ip || deps.core === undefined) return dialled;
      const hit = deps.core([dialled.host], port);
      return hit instanceof Promise
        ? hit.then((found) => notCore(dialled, port, found))
        : notCore(dialled, port, hit);
    },

    lookup(port) {
      let lookup = lookups.get(port);
      if (lookup === undefined) {
        lookup = lookupFor(port);
        lookups.set(port, lookup);
      }
      return lookup;
    },
  };
}

const familyOf = (family: number | "IPv4" | "IPv6" | undefined): number =>
  family === "IPv4" ? 4 : family === "IPv6" ? 6 : (family ?? 0);
