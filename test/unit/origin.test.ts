import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import {
  createOriginResolver,
  maxUserAgentChars,
  normalizeAddress,
  parseTrustedProxies,
  userAgentOf,
} from "../../src/server/origin.js";
import { testDataKey, testSecret } from "../support/server.js";

/** The resolution of a request's origin (src/server/origin.ts), without a server. */

const resolver = (trusted: string[]) => {
  const { proxies, problems } = parseTrustedProxies(trusted);
  expect(problems).toEqual([]);
  return createOriginResolver(proxies);
};

const request = (peer: string, headers: Record<string, string | string[]> = {}) => ({
  headers,
  socket: { remoteAddress: peer },
});

describe("the client address", () => {
  it("is the TCP peer when no proxy is trusted, whatever X-Forwarded-For says", () => {
    const resolve = resolver([]);
    expect(resolve(request("192.0.2.10", { "x-forwarded-for": "203.0.113.9" }))).toEqual({
      clientAddress: "192.0.2.10",
      peerAddress: "192.0.2.10",
      userAgent: "",
    });
  });

  it("is the TCP peer when the peer is not a trusted proxy: a spoofed header is ignored", () => {
    const resolve = resolver(["10.0.0.0/8"]);
    expect(
      resolve(request("192.0.2.10", { "x-forwarded-for": "203.0.113.9, 10.0.0.1" })).clientAddress,
    ).toBe("192.0.2.10");
  });

  it("is what a trusted proxy says", () => {
    const resolve = resolver(["10.0.0.0/8"]);
    expect(resolve(request("10.1.2.3", { "x-forwarded-for": "203.0.113.9" }))).toEqual({
      clientAddress: "203.0.113.9",
      peerAddress: "10.1.2.3",
      userAgent: "",
    });
  });

  it("is the right-most entry that is not a trusted proxy, through a chain of proxies", () => {
    const resolve = resolver(["10.0.0.0/8", "192.168.7.7", "fd00::/8"]);
    // client-chosen spoof, the real client, then two trusted proxies before the peer.
    const xff = "198.51.100.66, 203.0.113.9, 192.168.7.7, fd00::2";
    expect(resolve(request("10.0.0.1", { "x-forwarded-for": xff })).clientAddress).toBe(
      "203.0.113.9",
    );
    // Several headers are one list, in order.
    expect(
      resolve(
        request("10.0.0.1", { "x-forwarded-for": ["198.51.100.66, 203.0.113.9", "192.168.7.7"] }),
      ).clientAddress,
    ).toBe("203.0.113.9");
    // Every entry trusted: the left-most.
    expect(
      resolve(request("10.0.0.1", { "x-forwarded-for": "10.9.9.9, 10.8.8.8" })).clientAddress,
    ).toBe("10.9.9.9");
  });

  it("stops at a malformed entry: the nearest trusted hop is what is known", () => {
    const resolve = resolver(["10.0.0.0/8"]);
    expect(
      resolve(request("10.0.0.1", { "x-forwarded-for": "203.0.113.9, unknown, 10.0.0.2" }))
        .clientAddress,
    ).toBe("10.0.0.2");
    expect(resolve(request("10.0.0.1", { "x-forwarded-for": "" })).clientAddress).toBe("10.0.0.1");
    expect(resolve(request("10.0.0.1")).clientAddress).toBe("10.0.0.1");
  });

  it("has one spelling: IPv4-mapped IPv6 as IPv4, IPv6 compressed, ports and zones dropped", () => {
    const resolve = resolver(["10.0.0.0/8"]);
    expect(
      resolve(request("::ffff:10.0.0.1", { "x-forwarded-for": "[2001:DB8:0::1]:443" })),
    ).toEqual({ clientAddress: "2001:db8::1", peerAddress: "10.0.0.1", userAgent: "" });
    expect(normalizeAddress("::FFFF:203.0.113.9")).toBe("203.0.113.9");
    expect(normalizeAddress("::ffff:cb00:7109")).toBe("203.0.113.9");
    expect(normalizeAddress("203.0.113.9:5678")).toBe("203.0.113.9");
    expect(normalizeAddress("fe80::1%eth0")).toBe("fe80::1");
    expect(normalizeAddress(" 2001:db8:0:0:0:0:0:1 ")).toBe("2001:db8::1");
    for (const bad of ["", "unknown", "203.0.113", "01.2.3.4", "1.2.3.4.5", "[1.2.3.4]", "::g"]) {
      expect(normalizeAddress(bad), bad).toBeUndefined();
    }
    expect(resolver([])({ headers: {}, socket: null }).clientAddress).toBe("unknown");
  });
});

describe("the User-Agent", () => {
  it("is kept without control, format and bidirectional characters, at most 256 characters", () => {
    expect(userAgentOf("curl/8.5.0")).toBe("curl/8.5.0");
    expect(userAgentOf(undefined)).toBe("");
    expect(userAgentOf("evil\r\nX-Injected: 1\u0000\u001b[31m")).toBe("evilX-Injected: 1[31m");
    expect(userAgentOf("a\u202eb\u200bc\u2028d\ufeffe\u0085f")).toBe("abcdef");
    const long = userAgentOf(`Mozilla/5.0 ${"x".repeat(1000)}`);
    expect(long.length).toBe(maxUserAgentChars);
    expect(long.startsWith("Mozilla/5.0 xxx")).toBe(true);
    expect(userAgentOf(`${"x".repeat(255)}😀`)).toBe("x".repeat(255));
  });
});

describe("TRUSTED_PROXIES", () => {
  it("takes IP addresses and CIDR ranges, and names every bad entry", () => {
    const { proxies, problems } = parseTrustedProxies([
      "10.0.0.0/8",
      "192.168.1.5",
      "::ffff:172.16.0.1",
      "FD00::/8",
      "not-an-ip",
      "10.0.0.0/33",
      "10.0.0.0/8/1",
      "::ffff:10.0.0.0/104",
      "1.2.3.4/x",
    ]);
    expect(proxies.entries).toEqual(["10.0.0.0/8", "192.168.1.5", "172.16.0.1", "fd00::/8"]);
    expect(problems).toHaveLength(5);
    expect(problems.join("\n")).toContain('"not-an-ip"');
    expect(proxies.has("10.200.0.1")).toBe(true);
    expect(proxies.has("192.168.1.6")).toBe(false);
    expect(proxies.has("fd12::1")).toBe(true);
    expect(proxies.has("unknown")).toBe(false);
    const wide = parseTrustedProxies(["200.0.0.0/7", "0.0.0.0/0", "2001:db8::/127"]).proxies;
    expect(wide.has("201.255.255.255")).toBe(true);
    expect(wide.has("255.255.255.255")).toBe(true);
    expect(wide.has("2001:db8::1")).toBe(true);
    expect(wide.has("2001:db8::2")).toBe(false);
    const narrow = parseTrustedProxies(["200.0.0.0/7"]).proxies;
    expect(narrow.has("202.0.0.0")).toBe(false);
    expect(narrow.has("199.255.255.255")).toBe(false);
  });

  it("is read from the environment, empty by default, and refuses a bad value at start", () => {
    const env = { JWT_SECRET: testSecret, DATA_ENCRYPTION_KEY: testDataKey };
    expect(loadConfig(env).config.trustedProxies).toEqual([]);
    expect(
      loadConfig({ ...env, TRUSTED_PROXIES: " 10.0.0.0/8 , ::1 " }).config.trustedProxies,
    ).toEqual(["10.0.0.0/8", "::1"]);
    expect(() => loadConfig({ ...env, TRUSTED_PROXIES: "10.0.0.0/8,proxy.internal" })).toThrow(
      /TRUSTED_PROXIES: "proxy.internal"/,
    );
  });
});
