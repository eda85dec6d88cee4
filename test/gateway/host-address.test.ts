import type { LookupAddress } from "node:dns";
import { describe, expect, it } from "vitest";
import { addressRefusedCode, createConnectGuard } from "../../src/gateway/connect-guard.js";
import { classifyAddress, parseHost } from "../../src/gateway/host-address.js";
import { createHostPolicy, parseAllowedHosts } from "../../src/gateway/host-policy.js";

/**
 * Hosts as addresses: one canonical spelling, the class of every address, the allow-list, and
 * the connect-time lookup that refuses a name resolving to a refused address. No sockets.
 */

describe("parseHost", () => {
  it.each([
    ["2852039166", "169.254.169.254"],
    ["0xa9fea9fe", "169.254.169.254"],
    ["0XA9FEA9FE", "169.254.169.254"],
    ["0251.0376.0251.0376", "169.254.169.254"],
    ["169.254.169.254.", "169.254.169.254"],
    ["１６９.２５４.１６９.２５４", "169.254.169.254"],
    ["0x7f.1", "127.0.0.1"],
    ["0", "0.0.0.0"],
    ["::ffff:169.254.169.254", "169.254.169.254"],
    ["::ffff:a9fe:a9fe", "169.254.169.254"],
    ["[::FFFF:A9FE:A9FE]", "169.254.169.254"],
    ["0:0:0:0:0:0:0:1", "::1"],
    ["[2001:DB8:0::1]", "2001:db8::1"],
    ["::a9fe:a9fe", "::a9fe:a9fe"],
    ["Rag.Internal.", "rag.internal"],
    ["LOCALHOST.", "localhost"],
    ["bücher.example", "xn--bcher-kva.example"],
    ["  10.0.0.1 ", "10.0.0.1"],
  ])("%s is %s", (input, canonical) => {
    const host = parseHost(input);
    expect(host?.kind === "ip" ? host.address : host?.name).toBe(canonical);
  });

  it.each([
    "",
    "fe80::1%eth0",
    "[fe80::1%25eth0]",
    "169.254.169.254:80",
    "[169.254.169.254]",
    "user@host",
    "%31.0.0.1",
    "a b",
    "a/b",
    "a\\b",
    "1.2.3.999",
    "-x.example",
    "x..example",
    "rag_db",
    "::ffff:1.2.3.4.5",
  ])("%j is not a host", (input) => {
    expect(parseHost(input)).toBeUndefined();
  });
});

describe("classifyAddress", () => {
  it.each([
    ["169.254.169.254", "metadata"],
    ["::ffff:169.254.169.254", "metadata"],
    ["::ffff:a9fe:a9fe", "metadata"],
    ["::ffff:0:a9fe:a9fe", "metadata"],
    ["::a9fe:a9fe", "metadata"],
    ["64:ff9b::a9fe:a9fe", "metadata"],
    ["2002:a9fe:a9fe::1", "metadata"],
    ["fd00:ec2::254", "metadata"],
    ["100.100.100.200", "metadata"],
    ["168.63.129.16", "metadata"],
    ["169.254.0.1", "link_local"],
    ["fe80::1", "link_local"],
    ["fe80::1%eth0", "link_local"],
    ["febf::1", "link_local"],
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "unspecified"],
    ["::", "unspecified"],
    ["224.0.0.251", "multicast"],
    ["239.255.255.250", "multicast"],
    ["ff02::1", "multicast"],
    ["255.255.255.255", "broadcast"],
    ["240.0.0.1", "reserved"],
    ["not an address", "reserved"],
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["::1", "loopback"],
    ["::ffff:127.0.0.1", "loopback"],
    ["10.1.2.3", "private"],
    ["172.31.255.255", "private"],
    ["192.168.0.1", "private"],
    ["100.64.0.1", "private"],
    ["fc00::1", "private"],
    ["fd12:3456::1", "private"],
    ["172.32.0.1", "public"],
    ["203.0.113.9", "public"],
    ["2001:db8::1", "public"],
    ["::ffff:203.0.113.9", "public"],
    ["2002:cb00:7109::1", "public"],
  ])("%s is %s", (address, cls) => {
    expect(classifyAddress(address)).toBe(cls);
  });
});

describe("PLUGIN_ALLOWED_HOSTS", () => {
  it("takes names, addresses and CIDR ranges, and names every entry that cannot be one", () => {
    expect(
      parseAllowedHosts(["127.0.0.1", "localhost", "::1", "10.0.0.0/8", "fc00::/7"]).problems,
    ).toEqual([]);
    expect(
      parseAllowedHosts([
        "10.0.0.0/33",
        "10.0.0.0/x",
        "rag_db",
        "169.254.169.254",
        "metadata.google.internal",
        "fe80::1",
      ]).problems,
    ).toEqual([
      "PLUGIN_ALLOWED_HOSTS: 10.0.0.0/33 is not a host name, IP address or CIDR range (10.0.0.0/8, fc00::/7)",
      "PLUGIN_ALLOWED_HOSTS: 10.0.0.0/x is not a host name, IP address or CIDR range (10.0.0.0/8, fc00::/7)",
      "PLUGIN_ALLOWED_HOSTS: rag_db is not a host name, IP address or CIDR range (10.0.0.0/8, fc00::/7)",
      "PLUGIN_ALLOWED_HOSTS: 169.254.169.254 is a cloud metadata address: never allowed",
      "PLUGIN_ALLOWED_HOSTS: metadata.google.internal is a cloud metadata name: never allowed",
      "PLUGIN_ALLOWED_HOSTS: fe80::1 is a link-local address: never allowed",
    ]);
  });

  it("lets private and loopback addresses through only when listed, never the refused classes", () => {
    const policy = createHostPolicy({
      allowedHosts: ["rag.internal", "10.20.0.0/16", "0.0.0.0/0"],
    });
    expect(policy.dialRefusal("rag.internal", "127.0.0.1")).toBeUndefined();
    expect(policy.dialRefusal("other.example", "10.20.9.9")).toBeUndefined();
    expect(policy.dialRefusal("other.example", "::ffff:10.20.9.9")).toBeUndefined();
    expect(policy.dialRefusal("other.example", "10.30.0.1")).toBeUndefined(); // 0.0.0.0/0
    expect(policy.dialRefusal("other.example", "::1")).toBe("loopback");
    expect(policy.dialRefusal("rag.internal", "169.254.169.254")).toBe("metadata");
    expect(policy.dialRefusal("rag.internal", "0.0.0.0")).toBe("unspecified");
    expect(policy.dialRefusal("metadata.google.internal", "203.0.113.1")).toBe("metadata");
    expect(policy.dialRefusal("a b", "203.0.113.1")).toBe("invalid_host");
  });
});

describe("the connect guard", () => {
  const policy = createHostPolicy({ allowedHosts: ["rag.internal"] });

  function guardWith(answers: Record<string, string[]>) {
    const asked: string[] = [];
    const refusals: unknown[] = [];
    const guard = createConnectGuard({
      policy,
      resolve: async (name) => {
        asked.push(name);
        return answers[name] ?? [];
      },
      onRefused: (r) => refusals.push(r),
    });
    const lookup = (name: string, options: { all?: boolean; family?: number } = {}) =>
      new Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[] }>(
        (resolve) => guard.lookup(8080)(name, options, (err, address) => resolve({ err, address })),
      );
    return { guard, asked, refusals, lookup };
  }

  it("fails a name when any address it resolves to is refused, before anything is dialled", async () => {
    const { lookup, asked, refusals } = guardWith({
      "evil.example": ["203.0.113.5", "169.254.169.254"],
    });
    const { err } = await lookup("evil.example", { all: true });
    expect(err?.code).toBe(addressRefusedCode);
    expect(asked).toEqual(["evil.example"]);
    expect(refusals).toEqual([
      { host: "evil.example", port: 8080, address: "169.254.169.254", addressClass: "metadata" },
    ]);
  });

  it("answers allowed addresses as net asks for them (all, or the first of a family)", async () => {
    const { lookup } = guardWith({
      "rag.internal": ["127.0.0.1", "::1"],
      "public.example": ["203.0.113.5"],
    });
    expect(await lookup("rag.internal", { all: true })).toEqual({
      err: null,
      address: [
        { address: "127.0.0.1", family: 4 },
        { address: "::1", family: 6 },
      ],
    });
    expect(await lookup("rag.internal", { family: 6 })).toEqual({ err: null, address: "::1" });
    expect((await lookup("public.example", { family: 6 })).err?.code).toBe("ENOTFOUND");
    expect((await lookup("nowhere.example")).err?.code).toBe("ENOTFOUND");
  });

  it("checks IP literals itself (Node dials them without a lookup) and dials their canonical form", () => {
    const { guard, asked } = guardWith({});
    expect(guard.target("2852039166", 8080)).toEqual({ refused: "metadata" });
    expect(guard.target("0x7f.1", 8080)).toEqual({ refused: "loopback" });
    expect(guard.target("::ffff:a9fe:a9fe", 8080)).toEqual({ refused: "metadata" });
    expect(guard.target("metadata.google.internal", 8080)).toEqual({ refused: "metadata" });
    expect(guard.target("bad host", 8080)).toEqual({ refused: "invalid_host" });
    expect(guard.target("::ffff:203.0.113.9", 8080)).toEqual({ host: "203.0.113.9" });
    expect(guard.target("Rag.Internal.", 8080)).toEqual({ host: "rag.internal" });
    expect(asked).toEqual([]);
  });
});
