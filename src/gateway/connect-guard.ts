import type { LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { isMetadataName, parseHost } from "./host-address.js";
import type { HostPolicy, HostResolver } from "./host-policy.js";

/**
 * The forward-time half of the host policy: the address the gateway actually dials is
 * checked, whatever the name resolved to at registration (DNS can change in between). A
 * manifest's IP literal is checked before dialling (Node dials literals without a lookup);
 * a name goes through `lookup`, which resolves it, checks every address, and fails the
 * connection before any socket is opened when one is refused.
 */

/** The `code` of the error a refused lookup fails the connection with. */
export const addressRefusedCode = "ERR_PLUGIN_ADDRESS_REFUSED";

/** A refused connection: the host, the address it is or resolved to, and that address's class. */
export interface Refusal {
  host: string;
  address: string;
  addressClass: string;
}

export interface ConnectGuard {
  /** What to dial for a manifest's host (its canonical form), or why nothing may be. */
  target(host: string): { host: string } | { refused: string };
  /** For `http.request`: resolves a name, and refuses it when any address is refused. */
  lookup: LookupFunction;
}

export function createConnectGuard(deps: {
  policy: Pick<HostPolicy, "dialRefusal">;
  resolve: HostResolver;
  /** Told of every refusal (for the operator's log); never given payloads. */
  onRefused?: (refusal: Refusal) => void;
}): ConnectGuard {
  const refuse = (host: string, address: string, addressClass: string) => {
    deps.onRefused?.({ host, address, addressClass });
    return addressClass;
  };

  /** What to dial for a manifest's host; the policy is fixed, so each host is worked out once. */
  function targetOf(text: string): { host: string } | { refused: string; refusal: Refusal } {
    const refused = (host: string, address: string, addressClass: string) => ({
      refused: addressClass,
      refusal: { host, address, addressClass },
    });
    const host = parseHost(text);
    if (host === undefined) return refused(text, "", "invalid_host");
    if (host.kind === "name") {
      // Its addresses are checked by `lookup`, when it is dialled.
      return isMetadataName(host.name) ? refused(host.name, "", "metadata") : { host: host.name };
    }
    const refusal = deps.policy.dialRefusal(host.address, host.address);
    return refusal === undefined
      ? { host: host.address }
      : refused(host.address, host.address, refusal);
  }
  const targets = new Map<string, ReturnType<typeof targetOf>>();

  return {
    target(text) {
      let target = targets.get(text);
      if (target === undefined) {
        if (targets.size >= 1024) targets.clear();
        target = targetOf(text);
        targets.set(text, target);
      }
      if (!("refused" in target)) return target;
      deps.onRefused?.(target.refusal);
      return { refused: target.refused };
    },

    lookup(hostname, options, callback) {
      deps.resolve(hostname).then(
        (addresses) => {
          for (const address of addresses) {
            const refusal = deps.policy.dialRefusal(hostname, address);
            if (refusal !== undefined) {
              const err: NodeJS.ErrnoException & { addressClass?: string } = new Error(
                `${hostname} resolves to an address plugins may not be reached at`,
              );
              err.code = addressRefusedCode;
              err.addressClass = refuse(hostname, address, refusal);
              callback(err, "");
              return;
            }
          }
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
    },
  };
}

const familyOf = (family: number | "IPv4" | "IPv6" | undefined): number =>
  family === "IPv4" ? 4 : family === "IPv6" ? 6 : (family ?? 0);
