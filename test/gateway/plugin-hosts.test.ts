import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callJson, type JsonReply } from "../support/http.js";
import { operatorCallReason } from "../support/operator-lane.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Where the gateway may send a plugin's traffic, checked on addresses, not on spellings: at
 * registration over REST (every way of writing a refused address is refused, names are
 * resolved), and at forward time on the address actually dialled (a name that resolved to an
 * allowed address at registration and to a refused one later gets no connection).
 *
 * Names resolve through a fake resolver, and the only server anything could connect to is a
 * local one that counts connections: no test sends traffic to a real refused address.
 */

const password = "plugin-hosts-admin-pw";
let server: TestServer;
let admin: { token: string; key: string };
let aiCore = "";

/** Plugins' addresses; PLUGIN_ALLOWED_HOSTS lists plugins.internal, later.internal, 10.20/16. */
const answers = new Map<string, string[]>([
  ["localhost", ["127.0.0.1", "::1"]],
  ["plugins.internal", ["10.20.0.5"]],
  ["inside.test", ["10.20.3.4"]],
  ["public.test", ["203.0.113.10", "2001:db8::10"]],
  ["imds.attacker.test", ["169.254.169.254"]],
  ["mixed.attacker.test", ["203.0.113.5", "169.254.169.254"]],
  ["internal.attacker.test", ["10.0.0.7"]],
  ["rebind.test", ["203.0.113.7"]],
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

/** The one server plugins could reach (loopback): it counts connections and answers {}. */
let counting: Server;
let countingPort = 0;
let connections = 0;

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
  counting = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.setHeader("content-type", "application/json").end('{"ok":true}'));
  });
  counting.on("connection", () => connections++);
  await new Promise<void>((resolve) => counting.listen(0, "127.0.0.1", resolve));
  countingPort = (counting.address() as AddressInfo).port;

  server = await startTestServer({
    env: { PLUGIN_ALLOWED_HOSTS: "plugins.internal,later.internal,10.20.0.0/16" },
    resolveHost,
  });
  await server.createUser("root", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "root", password });
  admin = {
    token: login.body.token as string,
    key: await server.createApiKey([
      "plugins:read",
      "plugins:write",
      "operator:write",
      "service_accounts:write",
    ]),
  };
  const sa = await callJson(
    server.url,
    "/api/admin/service-accounts",
    { name: "ai-core", roles: ["service"] },
    { token: admin.token, headers: { "x-api-key": admin.key } },
  );
  const token = await callJson(server.url, "/auth/token", {
    grant_type: "client_credentials",
    client_id: "ai-core",
    client_secret: sa.body.client_secret,
  });
  aiCore = token.body.access_token as string;
});

afterAll(async () => {
  await server?.close();
  await new Promise<void>((resolve) => counting.close(() => resolve()));
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

describe("forward time checks the address actually dialled", () => {
  /** Registers `host` on the counting server's port, allowlisted for ai-core. */
  async function plugin(host: string) {
    const res = await register(host, true, countingPort);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const id = (res.body.plugin as { manifest: { id: string } }).manifest.id;
    const allow = await adminCall(
      "/admin/operator/allowlist",
      { caller: "ai-core", target: id, operations: ["ping"] },
      "PUT",
    );
    expect(allow.status).toBe(200);
    return id;
  }

  const ping = (id: string) =>
    callJson(
      server.url,
      `/gateway/${id}/ping`,
      { caller_plugin: "ai-core", payload: {} },
      { token: aiCore },
    );

  it("a name that now resolves to a refused address gets no connection: 503, PLUGIN_ADDRESS_REFUSED", async () => {
    const id = await plugin("rebind.test");
    answers.set("rebind.test", ["127.0.0.1"]);
    const askedBefore = asked.length;
    const before = connections;
    const res = await ping(id);
    expect([res.status, res.reason]).toEqual([503, "PLUGIN_UNAVAILABLE"]);
    expect(asked.slice(askedBefore)).toContain("rebind.test");
    expect(await reasonOf(id)).toBe("PLUGIN_ADDRESS_REFUSED");
    expect(connections).toBe(before);
    const warned = server.logs.filter((l) => l.includes("plugin connection refused"));
    expect(warned.map((l) => JSON.parse(l))).toContainEqual(
      expect.objectContaining({
        plugin_host: "rebind.test",
        address: "127.0.0.1",
        address_class: "loopback",
      }),
    );
  });

  it("a listed name that resolves to loopback is dialled (the counting server sees it)", async () => {
    const id = await plugin("plugins.internal");
    answers.set("plugins.internal", ["127.0.0.1"]);
    const before = connections;
    const res = await ping(id);
    expect([res.status, res.body]).toEqual([200, { ok: true }]);
    expect(connections).toBe(before + 1);
    expect(await reasonOf(id)).toBe("");
  });

  it("a host stored before this check, spelled as a number, is checked as the address it is", async () => {
    const id = await plugin("203.0.113.30");
    await server.core.db.query("UPDATE plugins SET host = '2130706433' WHERE id = $1", [id]);
    const before = connections;
    const res = await ping(id);
    expect([res.status, res.reason]).toEqual([503, "PLUGIN_UNAVAILABLE"]);
    expect(await reasonOf(id)).toBe("PLUGIN_ADDRESS_REFUSED");
    expect(connections).toBe(before);
  });
});

/** The reason of the operator_call event of plugin `id`, once written. */
const reasonOf = (id: string) => operatorCallReason(server, id);
