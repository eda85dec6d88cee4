import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPluginReachability } from "../../src/gateway/reachability.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * CheckPluginReachability over REST on a real core (docs/operator-lane.md, "Reachability"):
 * `GET /healthz` on each plugin's host and port through the gateway's connect guard, without
 * any secret; every state a plugin can be in.
 */

const password = "reachability lantern 7731";
let server: TestServer;
let admin: { token: string; key: string };
const servers: Server[] = [];
/** Headers each health endpoint received. */
const seen: IncomingHttpHeaders[] = [];

/** Names resolve here: `rebind.test` is public at registration and the metadata address later. */
const answers = new Map<string, string[]>([["rebind.test", ["203.0.113.7"]]]);
async function resolveHost(name: string): Promise<string[]> {
  const found = answers.get(name);
  if (found === undefined) {
    throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: "ENOTFOUND" });
  }
  return found;
}

async function healthServer(answer: "ok" | "sick" | "silent"): Promise<number> {
  const s = createServer((req, res) => {
    seen.push(req.headers);
    if (answer === "silent") return; // never answers
    res.statusCode = answer === "ok" && req.url === "/healthz" ? 200 : 503;
    res.setHeader("content-type", "application/json").end('{"ok":true}');
  });
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  return (s.address() as AddressInfo).port;
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

const adminGet = (path: string) =>
  callJson(server.url, path, undefined, {
    token: admin.token,
    method: "GET",
    headers: { "x-api-key": admin.key },
  });

beforeAll(async () => {
  server = await startTestServer({
    // A short gateway timeout: the silent plugin times out quickly.
    env: { GATEWAY_TIMEOUT_MS: "300" },
    resolveHost,
  });
  await server.createUser("root", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "root", password });
  admin = { token: login.body.token as string, key: await server.createApiKey(["plugins:read"]) };
  const plugins: [string, string, number][] = [
    ["up", "127.0.0.1", await healthServer("ok")],
    ["sick", "127.0.0.1", await healthServer("sick")],
    ["silent", "127.0.0.1", await healthServer("silent")],
    ["down", "127.0.0.1", await closedPort()],
    ["rebind", "rebind.test", 8080],
  ];
  for (const [id, host, port] of plugins) {
    await server.core.plugins.register(
      { kind: "system", id: "" },
      { requestId: `register-${id}` },
      {
        id,
        name: id,
        pluginType: "internal",
        endpoints: { ping: "/ping" },
        host,
        port,
        traits: [],
      },
      host === "rebind.test",
    );
  }
  answers.set("rebind.test", ["169.254.169.254"]);
});

afterAll(async () => {
  await server?.close();
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
});

describe("plugin reachability", () => {
  it("answers each plugin's state: reachable, unhealthy, timeout, unreachable, refused", async () => {
    const res = await adminGet("/admin/plugin-reachability");
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const byId = new Map(
      (res.body.plugins as Record<string, unknown>[]).map((p) => [p.plugin_id, p]),
    );
    expect(byId.get("up")).toMatchObject({ state: "reachable", http_status: 200 });
    expect(byId.get("sick")).toMatchObject({ state: "unhealthy", http_status: 503 });
    expect(byId.get("silent")).toMatchObject({ state: "timeout" });
    expect(byId.get("down")).toMatchObject({ state: "unreachable", detail: "ECONNREFUSED" });
    // The metadata address is never dialled.
    expect(byId.get("rebind")).toMatchObject({ state: "refused", http_status: 0 });
    expect(byId.get("rebind")?.detail).toMatch(/metadata|link/);
    expect(byId.size).toBe(5);
  });

  it("asks the health path with a GET and no secret", () => {
    expect(seen.length).toBeGreaterThanOrEqual(3);
    for (const headers of seen) {
      expect(headers.authorization).toBeUndefined();
      expect(headers["content-length"]).toBeUndefined();
    }
  });

  it("checks one plugin when named, and 404s an unknown one", async () => {
    const one = await adminGet("/admin/plugin-reachability?plugin_id=up");
    expect((one.body.plugins as unknown[]).length).toBe(1);
    const unknown = await adminGet("/admin/plugin-reachability?plugin_id=nope");
    expect(unknown.status).toBe(404);
  });
});

describe("checking many plugins", () => {
  it("probes at most 16 at once per check, and answers in order; one plugin's check does not wait behind another check", async () => {
    let inFlight = 0;
    let most = 0;
    const manifests = Array.from({ length: 40 }, (_, i) => ({
      id: `p${i}`,
      name: `p${i}`,
      pluginType: "internal",
      endpoints: {},
      host: "203.0.113.7",
      port: 9000 + i,
      traits: [],
    }));
    const check = createPluginReachability({
      forwarder: {
        forward: async (req) => {
          inFlight++;
          most = Math.max(most, inFlight);
          await new Promise((resolve) => setTimeout(resolve, 5));
          inFlight--;
          return {
            kind: "reply",
            status: req.port % 2 === 0 ? 200 : 503,
            body: Buffer.from("{}"),
            contentType: "application/json",
          };
        },
      },
      manifests: async (id) => (id ? manifests.filter((m) => m.id === id) : manifests),
      timeoutMs: 1000,
    });
    const all = await check.check();
    expect(most).toBe(16);
    expect(all.map((r) => r.pluginId)).toEqual(manifests.map((m) => m.id));
    expect(all.map((r) => r.state)).toEqual(
      manifests.map((m) => (m.port % 2 === 0 ? "reachable" : "unhealthy")),
    );
    // A check of one plugin while another checks all of them: answered after its own probe.
    most = 0;
    let everythingDone = false;
    const everything = check.check().then(() => {
      everythingDone = true;
    });
    const one = await check.check("p3");
    expect(one.map((r) => r.pluginId)).toEqual(["p3"]);
    expect(everythingDone).toBe(false);
    await everything;
    expect(most).toBe(17);
  });
});
