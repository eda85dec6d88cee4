import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reachesListener } from "../../src/gateway/core-address.js";
import { callJson, type JsonReply } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * A manifest may not point at the core itself (docs/operator-lane.md printed the echo
 * plugin's manifest with the core's own port 8080, and registration took it): its host, as
 * written or resolved, on the core's own port is `400 PLUGIN_IS_CORE` naming `manifest.port`,
 * at registration and at an update; another port of the same host is a plugin like any.
 */

const password = "plugin-is-core-admin-pw";
let server: TestServer;
let admin: { token: string; key: string };

const adminCall = (path: string, body: unknown, method = "POST") =>
  callJson(server.url, path, body, {
    token: admin.token,
    method,
    headers: { "x-api-key": admin.key },
  });

const manifest = (id: string, host: string, port: number) => ({
  id,
  plugin_type: "internal",
  endpoints: { ping: "/ping" },
  host,
  port,
});

const errorInfo = (res: JsonReply) =>
  (res.body.details as { reason?: string; metadata?: Record<string, string> }[] | undefined)?.[0];

beforeAll(async () => {
  server = await startTestServer({
    // `localhost` resolves as getaddrinfo would on this machine, without asking it.
    resolveHost: async (name) => {
      if (name === "localhost") return ["127.0.0.1", "::1"];
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: "ENOTFOUND" });
    },
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

describe("a manifest pointing at the core itself", () => {
  it.each([
    ["127.0.0.1", "127.0.0.1"],
    ["localhost", "127.0.0.1"],
    ["0x7f.1", "127.0.0.1"],
  ])("is refused at registration: host %s on the core's port", async (host, address) => {
    const res = await adminCall("/admin/plugins", manifest("selfie", host, server.port));
    expect(res.status).toBe(400);
    expect(errorInfo(res)?.reason).toBe("PLUGIN_IS_CORE");
    expect(errorInfo(res)?.metadata).toMatchObject({
      field: "manifest.port",
      port: String(server.port),
      address,
    });
    expect(res.body.message).toContain("manifest.host");
    expect((await adminCall("/admin/plugins/selfie", undefined, "GET")).status).toBe(404);
  });

  it("is refused at an update; the same host on another port is accepted", async () => {
    const otherPort = server.port === 65535 ? 65534 : server.port + 1;
    const created = await adminCall(
      "/admin/plugins",
      manifest("neighbour", "127.0.0.1", otherPort),
    );
    expect(created.status).toBe(200);
    const moved = await adminCall(
      "/admin/plugins/neighbour",
      manifest("neighbour", "localhost", server.port),
      "PUT",
    );
    expect(moved.status).toBe(400);
    expect(errorInfo(moved)?.reason).toBe("PLUGIN_IS_CORE");
    const kept = await adminCall("/admin/plugins/neighbour", undefined, "GET");
    expect((kept.body.plugin as { manifest: { port: number } }).manifest.port).toBe(otherPort);
  });
});

describe("which addresses reach a listener", () => {
  it("a specific address only itself; the any-address loopback and its own interfaces", () => {
    expect(reachesListener("127.0.0.1", "127.0.0.1", [])).toBe(true);
    expect(reachesListener("127.0.0.2", "127.0.0.1", [])).toBe(false);
    expect(reachesListener("::ffff:127.0.0.1", "127.0.0.1", [])).toBe(true);
    expect(reachesListener("10.0.0.5", "10.0.0.5", [])).toBe(true);
    // 0.0.0.0 takes IPv4 only; :: takes both families.
    expect(reachesListener("127.0.0.2", "0.0.0.0", [])).toBe(true);
    expect(reachesListener("::1", "0.0.0.0", [])).toBe(false);
    expect(reachesListener("::1", "::", [])).toBe(true);
    expect(reachesListener("127.0.0.1", "::", [])).toBe(true);
    expect(reachesListener("10.0.0.5", "0.0.0.0", ["10.0.0.5"])).toBe(true);
    expect(reachesListener("10.0.0.6", "0.0.0.0", ["10.0.0.5"])).toBe(false);
  });
});
