import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callJson, type JsonReply } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Where the gateway may send a plugin's traffic, checked on addresses, not on spellings, at
 * registration over REST: every way of writing a refused address is refused, and names are
 * resolved (through a fake resolver; registration sends no traffic to any address).
 */

const password = "plugin-hosts-admin-pw";
let server: TestServer;
let admin: { token: string; key: string };

/** Plugins' addresses; PLUGIN_ALLOWED_HOSTS lists plugins.internal, later.internal, 10.20/16. */
const answers = new Map<string, string[]>([
  ["localhost", ["127.0.0.1", "::1"]],
  ["plugins.internal", ["10.20.0.5"]],
  ["inside.test", ["10.20.3.4"]],
  ["public.test", ["203.0.113.10", "2001:db8::10"]],
  ["imds.attacker.test", ["169.254.169.254"]],
  ["mixed.attacker.test", ["203.0.113.5", "169.254.169.254"]],
  ["internal.attacker.test", ["10.0.0.7"]],
]);
/** Every name the core asked the resolver about, in order. */
const asked: string[] = [];
async function resolveHost(name: string): Promise<string[]> {
  asked.push(name);
  const found = answers.get(name);
  if (found === undefined) {
    throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: "ENOTFOUND" });
  }
  return found;
}

const adminCall = (path: string, body: unknown, method = "POST") =>
  callJson(server.url, path, body, {
    token: admin.token,
    method,
    headers: { "x-api-key": admin.key },
  });

let nextId = 0;
const register = (host: string, allowUnlisted = true, port = 8080) =>
  adminCall(`/admin/plugins${allowUnlisted ? "?allow_unlisted_host=true" : ""}`, {
    id: `p${++nextId}`,
    plugin_type: "internal",
    endpoints: { ping: "/ping" },
    host,
    port,
  });

/** The ErrorInfo metadata's `field` of a REST error. */
const fieldOf = (res: JsonReply) =>
  (res.body.details as { metadata?: { field?: string } }[] | undefined)?.[0]?.metadata?.field;

beforeAll(async () => {
  server = await startTestServer({
    env: { PLUGIN_ALLOWED_HOSTS: "plugins.internal,later.internal,10.20.0.0/16" },
    resolveHost,
  });
  await server.createUser("root", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "root", password });
  admin = {
    token: login.body.token as string,
    key: await server.createApiKey(["plugins:read", "plugins:write"]),
  };
});

afterAll(async () => {
  await server?.close();
});

describe("registration refuses every spelling of a refused address", () => {
  it.each([
    // The metadata address, however it is written.
    "169.254.169.254",
    "2852039166",
    "0xa9fea9fe",
    "0XA9FEA9FE",
    "0251.0376.0251.0376",
    "0xa9.0376.43518",
    "169.254.169.254.",
    "::ffff:169.254.169.254",
    "::ffff:a9fe:a9fe",
    "[::ffff:169.254.169.254]",
    "0:0:0:0:0:FFFF:A9FE:A9FE",
    "::a9fe:a9fe",
    "64:ff9b::a9fe:a9fe",
    "１６９.２５４.１６９.２５４",
    "169。254。169。254",
    // Names: the metadata services' own, and names that resolve to link-local.
    "metadata.google.internal",
    "METADATA.GOOGLE.INTERNAL.",
    "imds.attacker.test",
    "mixed.attacker.test",
    // Link-local, unspecified, multicast, broadcast, other metadata addresses.
    "169.254.0.1",
    "fe80::1",
    "FE80::A",
    "[fe80::1]",
    "0",
    "0.0.0.0",
    "0x0",
    "::",
    "[::]",
    "224.0.0.251",
    "ff02::1",
    "255.255.255.255",
    "fd00:ec2::254",
    "100.100.100.200",
    // Loopback and private ranges this server does not list.
    "127.0.0.1",
    "0x7f.1",
    "127.1",
    "2130706433",
    "LOCALHOST",
    "localhost.",
    "::1",
    "[::1]",
    "::ffff:127.0.0.1",
    "10.0.0.5",
    "012.0.0.5",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "fc00::1",
    "internal.attacker.test",
  ])("%s: 400 HOST_REFUSED naming manifest.host", async (host) => {
    const res = await register(host);
    expect([res.status, res.reason, fieldOf(res)]).toEqual([400, "HOST_REFUSED", "manifest.host"]);
  });

  it("says which class of address it refused", async () => {
    const classOf = async (host: string) =>
      (
        (await register(host)).body.details as {
          metadata?: { address_class?: string };
        }[]
      )[0]?.metadata?.address_class;
    expect(await classOf("2852039166")).toBe("metadata");
    expect(await classOf("fe80::1")).toBe("link_local");
    expect(await classOf("0")).toBe("unspecified");
    expect(await classOf("0x7f.1")).toBe("loopback");
    expect(await classOf("internal.attacker.test")).toBe("private");
  });

  it.each([
    "fe80::1%eth0",
    "[fe80::1%25eth0]",
    "169.254.169.254:80",
    "user@169.254.169.254",
    "%31%36%39.254.169.254",
    "http://169.254.169.254",
    "169.254.169.254/latest",
    "1.2.3.999",
    "[169.254.169.254]",
    "a b",
  ])("%s: 400 INVALID_MANIFEST naming manifest.host", async (host) => {
    const res = await register(host);
    expect([res.status, res.reason, fieldOf(res)]).toEqual([
      400,
      "INVALID_MANIFEST",
      "manifest.host",
    ]);
  });

  it("refuses an unlisted name that does not resolve, and a refused host in an update", async () => {
    const nowhere = await register("nowhere.attacker.test");
    expect([nowhere.status, nowhere.reason, fieldOf(nowhere)]).toEqual([
      400,
      "HOST_UNRESOLVABLE",
      "manifest.host",
    ]);
    const created = await register("203.0.113.20");
    expect(created.status).toBe(200);
    const id = (created.body.plugin as { manifest: { id: string } }).manifest.id;
    const moved = await adminCall(
      `/admin/plugins/${id}?allow_unlisted_host=true`,
      { plugin_type: "internal", endpoints: { ping: "/ping" }, host: "0xa9fea9fe" },
      "PUT",
    );
    expect([moved.status, moved.reason, fieldOf(moved)]).toEqual([
      400,
      "HOST_REFUSED",
      "manifest.host",
    ]);
  });
});

describe("registration accepts listed and public addresses, normalised", () => {
  it.each([
    // [as written, listed without allow_unlisted_host, as stored]
    ["plugins.internal", false, "plugins.internal"],
    ["PLUGINS.INTERNAL.", false, "plugins.internal"],
    ["later.internal", false, "later.internal"],
    ["10.20.1.2", false, "10.20.1.2"],
    ["012.20.1.2", false, "10.20.1.2"],
    ["inside.test", true, "inside.test"],
    ["public.test", true, "public.test"],
    ["203.0.113.9", true, "203.0.113.9"],
    ["::ffff:203.0.113.9", true, "203.0.113.9"],
    ["[2001:DB8::9]", true, "2001:db8::9"],
  ] as const)("%s", async (host, unlisted, stored) => {
    if (unlisted) {
      const refused = await register(host, false);
      expect([refused.status, refused.reason, fieldOf(refused)]).toEqual([
        400,
        "INVALID_MANIFEST",
        "manifest.host",
      ]);
    }
    const res = await register(host, unlisted);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.plugin).toMatchObject({ manifest: { host: stored }, unlisted_host: unlisted });
  });
});
