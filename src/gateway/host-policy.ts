import { lookup } from "node:dns/promises";
import { BlockList } from "node:net";
import { invalidArgument } from "../errors.js";
import {
  type AddressClass,
  alwaysRefused,
  classifyAddress,
  classLabel,
  isMetadataName,
  type ParsedHost,
  parseHost,
} from "./host-address.js";

/**
 * Where plugin traffic may go (docs/operator-lane.md, "Manifests and the SSRF stance").
 * PLUGIN_ALLOWED_HOSTS lists host names, IP addresses and CIDR ranges. A manifest's host is
 * *listed* when its name is listed or its address is in a listed address or range; an
 * unlisted host needs `allow_unlisted_host`. Whatever the list and the flag say, an address
 * is dialled only when its class allows it: never link-local, metadata, unspecified,
 * multicast, broadcast or reserved; private and loopback only when a listed address or range
 * holds it or the host is a listed name (the operator vouches for what it resolves to).
 * Checked at registration (names resolved) and on every address the gateway dials.
 */

/** Resolves a host name to its addresses, as `getaddrinfo` does (/etc/hosts, then DNS). */
export type HostResolver = (name: string) => Promise<string[]>;

export const systemResolver: HostResolver = async (name) =>
  (await lookup(name, { all: true, verbatim: true })).map((a) => a.address);

export interface HostPolicy {
  /**
   * Registration: checks a manifest's (canonical) host, resolving a name. Throws
   * invalid_argument naming `manifest.host`: HOST_REFUSED (its address may never be dialled),
   * HOST_UNRESOLVABLE (an unlisted name that does not resolve), INVALID_MANIFEST (unlisted
   * without `allowUnlisted`, or not a host). `addresses`: what the host is or resolves to
   * (none for a listed name that does not resolve yet).
   */
  check(
    host: string,
    allowUnlisted: boolean,
  ): Promise<{ unlistedHost: boolean; addresses: readonly string[] }>;
  /** Why `address` may not be dialled for `host`, or undefined when it may. */
  dialRefusal(host: string, address: string): AddressClass | "invalid_host" | undefined;
}

interface AllowList {
  names: Set<string>;
  addresses: BlockList;
}

/** PLUGIN_ALLOWED_HOSTS as data, with a message for every entry that cannot be one. */
export function parseAllowedHosts(entries: readonly string[]): {
  list: AllowList;
  problems: string[];
} {
  const list: AllowList = { names: new Set(), addresses: new BlockList() };
  const problems: string[] = [];
  const problem = (entry: string, why: string) =>
    problems.push(`PLUGIN_ALLOWED_HOSTS: ${entry} ${why}`);
  for (const entry of entries) {
    const slash = entry.indexOf("/");
    if (slash >= 0) {
      const network = parseHost(entry.slice(0, slash));
      const prefix = Number(entry.slice(slash + 1));
      const bits = network?.kind === "ip" && network.family === 4 ? 32 : 128;
      if (network?.kind !== "ip" || !/^\d{1,3}$/.test(entry.slice(slash + 1)) || prefix > bits) {
        problem(entry, "is not a host name, IP address or CIDR range (10.0.0.0/8, fc00::/7)");
        continue;
      }
      list.addresses.addSubnet(network.address, prefix, `ipv${network.family}`);
      continue;
    }
    const host = parseHost(entry);
    if (host === undefined) {
      problem(entry, "is not a host name, IP address or CIDR range (10.0.0.0/8, fc00::/7)");
    } else if (host.kind === "name") {
      if (isMetadataName(host.name)) problem(entry, "is a cloud metadata name: never allowed");
      list.names.add(host.name);
    } else {
      const cls = classifyAddress(host.address);
      if (alwaysRefused.has(cls)) problem(entry, `is a ${classLabel[cls]} address: never allowed`);
      list.addresses.addAddress(host.address, `ipv${host.family}`);
    }
  }
  return { list, problems };
}

const hostProblem = (reason: string, message: string, metadata: Record<string, string> = {}) =>
  invalidArgument(reason, message, { field: "manifest.host", metadata });

export function createHostPolicy(options: {
  allowedHosts: readonly string[];
  resolve?: HostResolver;
  /** How long registration waits for a name to resolve (default 5 s). */
  resolveTimeoutMs?: number;
}): HostPolicy {
  const { list } = parseAllowedHosts(options.allowedHosts);
  const resolve = options.resolve ?? systemResolver;
  const resolveTimeoutMs = options.resolveTimeoutMs ?? 5000;

  const isListed = (host: ParsedHost) =>
    host.kind === "name"
      ? list.names.has(host.name)
      : list.addresses.check(host.address, `ipv${host.family}`);

  function addressRefusal(host: ParsedHost, address: string): AddressClass | undefined {
    const cls = classifyAddress(address);
    if (alwaysRefused.has(cls)) return cls;
    if (cls !== "loopback" && cls !== "private") return undefined;
    if (host.kind === "name" && list.names.has(host.name)) return undefined;
    const dialled = parseHost(address.split("%")[0] ?? "");
    return dialled?.kind === "ip" && isListed(dialled) ? undefined : cls;
  }

  async function resolveWithin(name: string): Promise<string[] | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((done) => {
      timer = setTimeout(done, resolveTimeoutMs, undefined);
    });
    try {
      const addresses = await Promise.race([resolve(name), timeout]);
      return addresses !== undefined && addresses.length > 0 ? addresses : undefined;
    } catch {
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }

  const refused = (host: string, cls: AddressClass, resolved: boolean) =>
    hostProblem(
      "HOST_REFUSED",
      `host ${host} ${resolved ? "resolves to" : "is"} a ${classLabel[cls]} address, ${
        alwaysRefused.has(cls)
          ? "which is never allowed"
          : "allowed only when PLUGIN_ALLOWED_HOSTS lists it"
      }`,
      { address_class: cls },
    );

  return {
    async check(text, allowUnlisted) {
      const host = parseHost(text);
      if (host === undefined) {
        throw hostProblem("INVALID_MANIFEST", "host must be a host name or an IP address");
      }
      if (host.kind === "name" && isMetadataName(host.name)) {
        throw refused(text, "metadata", false);
      }
      if (host.kind === "ip") {
        const cls = addressRefusal(host, host.address);
        if (cls !== undefined && alwaysRefused.has(cls)) throw refused(text, cls, false);
      }
      const listed = isListed(host);
      if (!listed && !allowUnlisted) {
        throw hostProblem(
          "INVALID_MANIFEST",
          `host ${text} is not in PLUGIN_ALLOWED_HOSTS; register with allow_unlisted_host=true to allow it`,
        );
      }
      if (host.kind === "ip") {
        const cls = addressRefusal(host, host.address);
        if (cls !== undefined) throw refused(text, cls, false);
        return { unlistedHost: !listed, addresses: [host.address] };
      }
      const addresses = await resolveWithin(host.name);
      if (addresses === undefined) {
        // A listed name may not exist yet (its plugin not started): the gateway checks
        // every address it dials anyway. An admin's exception is judged on what it is now.
        if (listed) return { unlistedHost: false, addresses: [] };
        throw hostProblem(
          "HOST_UNRESOLVABLE",
          `host ${text} does not resolve; an unlisted host must, to be checked`,
        );
      }
      for (const address of addresses) {
        const cls = addressRefusal(host, address);
        if (cls !== undefined) throw refused(text, cls, true);
      }
      return { unlistedHost: !listed, addresses };
    },

    dialRefusal(text, address) {
      const host = parseHost(text);
      if (host === undefined) return "invalid_host";
      if (host.kind === "name" && isMetadataName(host.name)) return "metadata";
      return addressRefusal(host, address);
    },
  };
}
