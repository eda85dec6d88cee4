import { BlockList, isIP } from "node:net";

/**
 * Plugin hosts as addresses, not strings: one canonical spelling per host, and the class of
 * every address (what kind of network it reaches), so that `2852039166`, `0xa9fea9fe`,
 * `::ffff:a9fe:a9fe` and `169.254.169.254.` are all seen as the metadata address they are.
 * Pure functions; the policy built on them is in host-policy.ts (docs/operator-lane.md).
 */

export type ParsedHost =
  | { kind: "ip"; address: string; family: 4 | 6 }
  | { kind: "name"; name: string };

/** What an address reaches. The first six are never dialled; private and loopback only when listed. */
export type AddressClass =
  | "metadata"
  | "unspecified"
  | "broadcast"
  | "link_local"
  | "multicast"
  | "reserved"
  | "loopback"
  | "private"
  | "public";

export const alwaysRefused: ReadonlySet<AddressClass> = new Set([
  "metadata",
  "unspecified",
  "broadcast",
  "link_local",
  "multicast",
  "reserved",
]);

/** In words, for messages ("a link-local address"). */
export const classLabel: Record<AddressClass, string> = {
  metadata: "cloud metadata",
  unspecified: "unspecified (0.0.0.0/8, ::)",
  broadcast: "broadcast",
  link_local: "link-local",
  multicast: "multicast",
  reserved: "reserved",
  loopback: "loopback",
  private: "private",
  public: "public",
};

/** The cloud metadata services' own names (their addresses are in the ranges below). */
const metadataNames = new Set([
  "metadata",
  "metadata.google.internal",
  "metadata.goog",
  "instance-data",
  "instance-data.ec2.internal",
  "metadata.tencentyun.com",
]);
export const isMetadataName = (name: string): boolean => metadataNames.has(name);

const hostnamePattern =
  /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;
/** Characters that would make `http://<host>/` mean something else, zone ids (`%`) included. */
const notInHost = /[\s/\\@?#%]/;

/**
 * The canonical form of a host as written in a manifest or PLUGIN_ALLOWED_HOSTS, or
 * undefined when it is not a plain host name or IP address. IPv4 in any spelling the WHATWG
 * URL parser (and so `inet_aton`) accepts becomes dotted decimal, IPv6 is compressed in lower
 * case without brackets, an IPv4-mapped IPv6 address becomes its IPv4 address, names become
 * lower-case ASCII (IDNA) without a trailing dot. Zone ids, ports and user info are refused.
 */
export function parseHost(input: string): ParsedHost | undefined {
  let host = input.trim();
  if (host === "" || notInHost.test(host)) return undefined;
  if (host.startsWith("[") && host.endsWith("]")) {
    host = host.slice(1, -1);
    if (isIP(host) !== 6) return undefined;
  }
  if (host.includes(":")) {
    if (isIP(host) !== 6) return undefined;
    const canonical = canonicalIPv6(host);
    const mapped = embeddedIPv4(canonical, "mapped");
    return mapped === undefined
      ? { kind: "ip", address: canonical, family: 6 }
      : { kind: "ip", address: mapped, family: 4 };
  }
  let hostname: string;
  try {
    hostname = new URL(`http://${host}/`).hostname;
  } catch {
    return undefined;
  }
  if (isIP(hostname) === 4) return { kind: "ip", address: hostname, family: 4 };
  if (hostname.endsWith(".")) hostname = hostname.slice(0, -1);
  return hostnamePattern.test(hostname) ? { kind: "name", name: hostname } : undefined;
}

/** The canonical spelling of a parsed host. */
export const hostString = (host: ParsedHost): string =>
  host.kind === "ip" ? host.address : host.name;

const canonicalIPv6 = (address: string): string =>
  new URL(`http://[${address}]/`).hostname.slice(1, -1);

/** The eight 16-bit groups of a canonical (compressed, hexadecimal) IPv6 address. */
function groups(canonical: string): number[] {
  const [head = "", tail] = canonical.split("::");
  const part = (s: string) => (s === "" ? [] : s.split(":").map((g) => Number.parseInt(g, 16)));
  const left = part(head);
  if (tail === undefined) return left;
  const right = part(tail);
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

const dotted = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;

/**
 * The IPv4 address an IPv6 address carries, for the forms through which a host can reach
 * IPv4: mapped (::ffff:a.b.c.d), or also (`all`) translated (::ffff:0:a.b.c.d), compatible
 * (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::).
 */
function embeddedIPv4(canonical: string, which: "mapped" | "all"): string | undefined {
  const g = groups(canonical);
  const [a = 0, b = 0, c = 0, d = 0, e = 0, f = 0, x = 0, y = 0] = g;
  const zeroPrefix = a === 0 && b === 0 && c === 0 && d === 0;
  if (zeroPrefix && e === 0 && f === 0xffff) return dotted(x, y);
  if (which === "mapped") return undefined;
  if (zeroPrefix && e === 0xffff && f === 0) return dotted(x, y);
  if (zeroPrefix && e === 0 && f === 0 && (x !== 0 || y > 1)) return dotted(x, y);
  if (a === 0x64 && b === 0xff9b && c === 0 && d === 0 && e === 0 && f === 0) return dotted(x, y);
  if (a === 0x2002) return dotted(b, c);
  return undefined;
}

type Range = readonly [address: string, prefix: number];

function blockList(ranges: readonly Range[]): BlockList {
  const list = new BlockList();
  for (const [address, prefix] of ranges) {
    list.addSubnet(address, prefix, isIP(address) === 6 ? "ipv6" : "ipv4");
  }
  return list;
}

/** In order: the first class whose ranges hold an address is its class. */
const classes: ReadonlyArray<readonly [AddressClass, BlockList]> = [
  [
    "metadata",
    blockList([
      ["169.254.169.254", 32], // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle …
      ["100.100.100.200", 32], // Alibaba Cloud
      ["168.63.129.16", 32], // Azure WireServer
      ["fd00:ec2::254", 128], // AWS IMDS over IPv6
      ["fd00:ec2::23", 128], // AWS EKS Pod Identity
    ]),
  ],
  [
    "unspecified",
    blockList([
      ["0.0.0.0", 8],
      ["::", 128],
    ]),
  ],
  ["broadcast", blockList([["255.255.255.255", 32]])],
  [
    "link_local",
    blockList([
      ["169.254.0.0", 16],
      ["fe80::", 10],
    ]),
  ],
  [
    "multicast",
    blockList([
      ["224.0.0.0", 4],
      ["ff00::", 8],
    ]),
  ],
  [
    "reserved",
    blockList([
      ["240.0.0.0", 4],
      ["100::", 64],
    ]),
  ],
  [
    "loopback",
    blockList([
      ["127.0.0.0", 8],
      ["::1", 128],
    ]),
  ],
  [
    "private",
    blockList([
      ["10.0.0.0", 8],
      ["172.16.0.0", 12],
      ["192.168.0.0", 16],
      ["100.64.0.0", 10], // carrier-grade NAT
      ["198.18.0.0", 15], // benchmarking
      ["fc00::", 7], // unique local
      ["fec0::", 10], // site-local (deprecated)
      ["64:ff9b:1::", 48], // local-use NAT64
    ]),
  ],
];

/**
 * The class of an IP address (any spelling `net.isIP` accepts, with or without a zone id).
 * An IPv6 address that carries an IPv4 address (mapped, compatible, NAT64, 6to4) is at least
 * as restricted as that IPv4 address.
 */
export function classifyAddress(address: string): AddressClass {
  const bare = address.split("%")[0] ?? "";
  const family = isIP(bare);
  if (family === 0) return "reserved";
  if (family === 6) {
    const canonical = canonicalIPv6(bare);
    const inner = embeddedIPv4(canonical, "all");
    const innerClass = inner === undefined ? "public" : classifyAddress(inner);
    if (innerClass !== "public") return innerClass;
    return rangeClass(canonical, "ipv6");
  }
  return rangeClass(bare, "ipv4");
}

function rangeClass(address: string, type: "ipv4" | "ipv6"): AddressClass {
  for (const [cls, list] of classes) if (list.check(address, type)) return cls;
  return "public";
}
