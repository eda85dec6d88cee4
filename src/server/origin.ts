import type { IncomingHttpHeaders } from "node:http";
import { isIP } from "node:net";
import type { RequestOrigin } from "../audit/event.js";

/**
 * Where a request came from, resolved once per request when it arrives (src/server/app.ts),
 * for the audit log, the login throttle, the refusal sampling and the access log
 * (docs/audit.md, "Where a request came from"):
 *
 * - the client's address is the TCP peer, unless the peer is a trusted proxy
 *   (TRUSTED_PROXIES): then it is the right-most X-Forwarded-For entry that is not itself a
 *   trusted proxy (each proxy appends the address it was called from, so the entries to the
 *   right of the first untrusted one were written by proxies we trust, and those to its left
 *   by whoever the client is: anything). `Forwarded` (RFC 7239) is not read.
 * - the User-Agent without control, format or bidirectional characters, at most 256
 *   characters; "" when the request had none.
 *
 * Addresses are normalised: IPv6 compressed in lower case without zone, an IPv4-mapped IPv6
 * address as its IPv4 address, so one client has one spelling (and one throttle counter).
 */

export const maxUserAgentChars = 256;

/** The TCP peer too, when a trusted proxy named another client (for the access log). */
export interface ResolvedOrigin extends RequestOrigin {
  peerAddress: string;
}

export interface TrustedProxies {
  /** The entries as configured, normalised. */
  readonly entries: readonly string[];
  has(address: string): boolean;
}

/** TRUSTED_PROXIES entries (IP addresses and CIDR ranges), and a problem for each bad one. */
export function parseTrustedProxies(entries: readonly string[]): {
  proxies: TrustedProxies;
  problems: string[];
} {
  const ranges: Range[] = [];
  const problems: string[] = [];
  const kept: string[] = [];
  for (const entry of entries) {
    const slash = entry.indexOf("/");
    const text = slash < 0 ? entry : entry.slice(0, slash);
    const prefixText = slash < 0 ? undefined : entry.slice(slash + 1);
    const address = isIP(text) === 0 ? undefined : normalizeAddress(text);
    const family = address === undefined ? 0 : isIP(address);
    const bits = family === 4 ? 32 : 128;
    const prefix =
      prefixText === undefined
        ? bits
        : /^\d{1,3}$/.test(prefixText)
          ? Number(prefixText)
          : Number.NaN;
    // ::ffff:a.b.c.d/n is refused: write IPv4 ranges as IPv4.
    const mappedRange = prefixText !== undefined && family === 4 && isIP(text) === 6;
    if (address === undefined || !(prefix <= bits) || mappedRange) {
      problems.push(
        `TRUSTED_PROXIES: "${entry}" is not an IP address or CIDR range (e.g. 10.0.0.0/8, fd00::/8)`,
      );
      continue;
    }
    ranges.push(rangeOf(address, family === 4 ? 4 : 6, prefix));
    kept.push(prefixText === undefined ? address : `${address}/${prefix}`);
  }
  return {
    proxies: {
      entries: kept,
      has: (address) => ranges.length > 0 && inRanges(ranges, address),
    },
    problems,
  };
}

/**
 * A CIDR range, matched by hand: node:net's BlockList costs ~6 µs a check, which the walk
 * down X-Forwarded-For would pay several times on every request behind a proxy.
 */
type Range = { family: 4; base: number; mask: number } | { family: 6; base: bigint; mask: bigint };

const all128 = (1n << 128n) - 1n;

function rangeOf(address: string, family: 4 | 6, prefix: number): Range {
  if (family === 4) {
    const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
    return { family, base: (ipv4Number(address) & mask) >>> 0, mask };
  }
  const mask = all128 ^ ((1n << BigInt(128 - prefix)) - 1n);
  return { family, base: ipv6Number(address) & mask, mask };
}

/** Is `address` (normalised) in one of the ranges? */
function inRanges(ranges: readonly Range[], address: string): boolean {
  const family = isIP(address);
  if (family === 4) {
    const n = ipv4Number(address);
    return ranges.some((r) => r.family === 4 && (n & r.mask) >>> 0 === r.base);
  }
  if (family !== 6) return false;
  const n = ipv6Number(address);
  return ranges.some((r) => r.family === 6 && (n & r.mask) === r.base);
}

function ipv4Number(address: string): number {
  let n = 0;
  let octet = 0;
  for (let i = 0; i < address.length; i++) {
    const c = address.charCodeAt(i);
    if (c === 46) {
      n = n * 256 + octet;
      octet = 0;
    } else octet = octet * 10 + (c - 48);
  }
  return n * 256 + octet;
}

/** A compressed, hexadecimal IPv6 address (as normalizeAddress writes it) as a number. */
function ipv6Number(canonical: string): bigint {
  const [head = "", tail] = canonical.split("::");
  const part = (t: string) => (t === "" ? [] : t.split(":"));
  const left = part(head);
  const right = tail === undefined ? [] : part(tail);
  const groups = [
    ...left,
    ...new Array<string>(8 - left.length - right.length).fill("0"),
    ...right,
  ];
  return groups.reduce((n, g) => (n << 16n) | BigInt(Number.parseInt(g, 16) || 0), 0n);
}

/**
 * An address in its one spelling, or undefined when `text` is not an IP address. Accepts
 * what peers and proxies write: `a.b.c.d`, `a.b.c.d:port`, IPv6, `[IPv6]`, `[IPv6]:port`,
 * with a zone id on IPv6 (dropped).
 */
export function normalizeAddress(text: string): string | undefined {
  let host = text.trim();
  if (isIP(host) === 4) return host;
  // What a dual-stack listener gives for IPv4 clients, without the general path's URL parse.
  if (
    host.length > 7 &&
    host.slice(0, 7).toLowerCase() === "::ffff:" &&
    isIP(host.slice(7)) === 4
  ) {
    return host.slice(7);
  }
  if (host.startsWith("[")) {
    const end = host.indexOf("]");
    const after = host.slice(end + 1);
    if (end < 0 || (after !== "" && !/^:\d{1,5}$/.test(after))) return undefined;
    host = host.slice(1, end);
    if (isIP(host) !== 6) return undefined;
  } else if (/^[\d.]+:\d{1,5}$/.test(host)) {
    host = host.slice(0, host.indexOf(":"));
    return isIP(host) === 4 ? host : undefined;
  }
  if (isIP(host) !== 6) return undefined;
  const zone = host.indexOf("%");
  if (zone >= 0) host = host.slice(0, zone);
  const canonical = new URL(`http://[${host}]/`).hostname.slice(1, -1);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canonical);
  if (mapped === null) return canonical;
  const hi = Number.parseInt(mapped[1] ?? "0", 16);
  const lo = Number.parseInt(mapped[2] ?? "0", 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** Control and format characters (zero-width, bidirectional, BOM) and line separators: never kept. */
const unwanted = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

/** The User-Agent as it is recorded. */
export function userAgentOf(header: string | string[] | undefined): string {
  const raw = Array.isArray(header) ? header.join(" ") : (header ?? "");
  let clean = raw.replace(unwanted, "").trim();
  if (clean.length > maxUserAgentChars) {
    clean = clean.slice(0, maxUserAgentChars);
    // Not half of a surrogate pair.
    if (/[\uD800-\uDBFF]$/.test(clean)) clean = clean.slice(0, -1);
  }
  return clean;
}

/** The client a chain of trusted proxies names (see the top of this file). */
function forwardedClient(
  peer: string,
  header: string | string[] | undefined,
  proxies: TrustedProxies,
): string {
  if (header === undefined) return peer;
  const entries = (Array.isArray(header) ? header.join(",") : header).split(",");
  let client = peer;
  for (let i = entries.length - 1; i >= 0 && proxies.has(client); i--) {
    const named = normalizeAddress(entries[i] ?? "");
    // A malformed entry: what is left of it cannot be trusted; the nearest hop known is.
    if (named === undefined) break;
    client = named;
  }
  return client;
}

/** Resolves a request's origin as configured. */
export function createOriginResolver(
  proxies: TrustedProxies,
): (req: {
  headers: IncomingHttpHeaders;
  socket?: { remoteAddress?: string | undefined } | null;
}) => ResolvedOrigin {
  return (req) => {
    const remote = req.socket?.remoteAddress;
    const peer = (remote === undefined ? undefined : normalizeAddress(remote)) ?? "unknown";
    return {
      clientAddress: proxies.has(peer)
        ? forwardedClient(peer, req.headers["x-forwarded-for"], proxies)
        : peer,
      userAgent: userAgentOf(req.headers["user-agent"]),
      peerAddress: peer,
    };
  };
}
