import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DomainError } from "../../src/errors.js";
import {
  createCoreAddressCheck,
  createCoreDialCheck,
  reachesListener,
} from "../../src/gateway/core-address.js";
import { callJson, type JsonReply } from "../support/http.js";
import { operatorCallReason, serviceAccountToken } from "../support/operator-lane.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * A manifest may not point at the core itself (docs/operator-lane.md printed the echo
 * plugin's manifest with the core's own port 8080, and registration took it): its host, as
 * written or resolved, on the core's own port is `400 PLUGIN_IS_CORE` naming `manifest.port`,
 * at registration and at an update; another port of the same host is a plugin like any. And
 * the gateway never dials it: a name that resolves to the core later, or a manifest stored
 * with the port the core listens on now, gets no connection (503 PLUGIN_UNAVAILABLE, event
 * reason PLUGIN_IS_CORE), so the plugin's core secret never reaches the core.
 */

const password = "plugin-is-core-admin-pw";
let server: TestServer;
let admin: { token: string; key: string };
let aiCore = "";

/** What names resolve to (as getaddrinfo would on this machine, without asking it). */
const answers = new Map<string, string[]>([["localhost", ["127.0.0.1", "::1"]]]);

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
    resolveHost: async (name) => {
      const found = answers.get(name);
      if (found !== undefined) return found;
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: "ENOTFOUND" });
    },
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
  aiCore = await serviceAccountToken(server.url, adminCall, "ai-core");
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

describe("a plugin whose address reaches the core when dialled", () => {
  const otherPort = () => (server.port === 65535 ? 65534 : server.port + 1);

  /** Registers `host` on `port`, allowlisted for ai-core. */
  async function plugin(id: string, host: string, port: number) {
    const res = await adminCall(
      "/admin/plugins?allow_unlisted_host=true",
      manifest(id, host, port),
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const allow = await adminCall(
      "/admin/operator/allowlist",
      { caller: "ai-core", target: id, operations: ["ping"] },
      "PUT",
    );
    expect(allow.status).toBe(200);
  }

  let calls = 0;
  /** Calls the plugin through the gateway; `requests`: the core's requests with its id. */
  async function ping(id: string) {
    const requestId = `plugin-is-core-${++calls}`;
    const res = await callJson(
      server.url,
      `/gateway/${id}/ping`,
      { caller_plugin: "ai-core", payload: {} },
      { token: aiCore, headers: { "x-request-id": requestId } },
    );
    // The forwarded request would carry the same request id (and the plugin's core secret).
    await new Promise((resolve) => setTimeout(resolve, 50));
    const requests = server.logs
      .map((l) => JSON.parse(l) as { msg?: string; request_id?: string })
      .filter((l) => l.msg === "call" && l.request_id === requestId).length;
    return { ...res, requests };
  }

  const refusalsOf = (host: string) =>
    server.logs
      .filter((l) => l.includes("this core's own listening address"))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.plugin_host === host);

  it("a name that resolves to the core's address later gets no connection: 503, PLUGIN_IS_CORE", async () => {
    answers.set("moving.test", ["203.0.113.7"]);
    await plugin("moving", "moving.test", server.port);
    answers.set("moving.test", ["127.0.0.1"]);
    const res = await ping("moving");
    expect([res.status, res.reason]).toEqual([503, "PLUGIN_UNAVAILABLE"]);
    // Only the gateway call itself reached the core: nothing was forwarded back into it.
    expect(res.requests).toBe(1);
    expect(await reasonOf("moving")).toBe("PLUGIN_IS_CORE");
    expect(refusalsOf("moving.test")).toContainEqual(
      expect.objectContaining({
        level: "warn",
        address: "127.0.0.1",
        port: server.port,
        address_class: "core_listener",
      }),
    );
    expect(server.logs.filter((l) => l.includes("tgc_"))).toEqual([]);
  });

  it.each([
    ["stored-ip", "127.0.0.1"],
    ["stored-name", "localhost"],
  ])(
    "a manifest (%s) stored with the port the core listens on now is never dialled",
    async (id, host) => {
      // Registered on another port, then stored with the core's (as a manifest written before
      // the core listened, or before it was restarted on that port, would be).
      await plugin(id, host, otherPort());
      await server.core.db.query("UPDATE plugins SET port = $2 WHERE id = $1", [id, server.port]);
      const res = await ping(id);
      expect([res.status, res.reason]).toEqual([503, "PLUGIN_UNAVAILABLE"]);
      expect(res.requests).toBe(1);
      expect(await reasonOf(id)).toBe("PLUGIN_IS_CORE");
      expect(refusalsOf(host)).toContainEqual(
        expect.objectContaining({ address: "127.0.0.1", port: server.port }),
      );
    },
  );
});

describe("a core listening on a name", () => {
  it("checks manifests against the address it is bound to, without resolving its name", async () => {
    // The resolver knows no name at all: the core's own HOST included. The listener's bound
    // address (an IP) is what the check compares with, so nothing needs resolving.
    const named = await startTestServer({
      env: { HOST: "localhost" },
      resolveHost: async (name) => {
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: "ENOTFOUND" });
      },
    });
    try {
      await named.createUser("root", password, ["admin"]);
      const login = await callJson(named.url, "/auth/login", { username: "root", password });
      const key = await named.createApiKey(["plugins:write"]);
      const bound = named.core.server.boundAddress;
      expect(["127.0.0.1", "::1"]).toContain(bound);
      const res = await callJson(
        named.url,
        "/admin/plugins",
        manifest("selfie", bound, named.port),
        { token: login.body.token as string, headers: { "x-api-key": key } },
      );
      expect([res.status, errorInfo(res)?.reason]).toEqual([400, "PLUGIN_IS_CORE"]);
    } finally {
      await named.close();
    }
  });
});

/** The reason of the operator_call event of plugin `id`, once written. */
const reasonOf = (id: string) => operatorCallReason(server, id);

describe("the dial-time check's cost", () => {
  it("another port than the core's costs a comparison; the listener is worked out once", async () => {
    let resolved = 0;
    let interfaceReads = 0;
    let now = 0;
    const check = createCoreDialCheck({
      listener: () => ({ host: "core.local", port: 8080 }),
      resolve: async () => {
        resolved++;
        return ["0.0.0.0"];
      },
      interfaces: () => {
        interfaceReads++;
        return ["10.0.0.5"];
      },
      interfacesTtlMs: 1000,
      now: () => now,
    });
    expect(check(["127.0.0.1"], 8081)).toBeUndefined();
    expect([resolved, interfaceReads]).toEqual([0, 0]);
    // The listener's name resolves once, on the first dial on its port.
    expect(await check(["203.0.113.9", "10.0.0.5"], 8080)).toBe("10.0.0.5");
    expect(check(["127.0.0.2"], 8080)).toBe("127.0.0.2");
    expect(check(["::1"], 8080)).toBeUndefined();
    expect(check(["10.0.0.6"], 8080)).toBeUndefined();
    expect([resolved, interfaceReads]).toEqual([1, 1]);
    // Interface addresses are read again once they are older than the TTL.
    now = 2000;
    expect(check(["10.0.0.6"], 8080)).toBeUndefined();
    expect([resolved, interfaceReads]).toEqual([1, 2]);
  });

  it("refuses every dial on the core's port while the listener's name does not resolve, and asks again", async () => {
    let failing = true;
    let resolved = 0;
    const check = createCoreDialCheck({
      listener: () => ({ host: "core.local", port: 8080 }),
      resolve: async () => {
        resolved++;
        if (failing) throw new Error("EAI_AGAIN");
        return ["127.0.0.1"];
      },
      interfaces: () => [],
    });
    // Nobody can tell what reaches the core: fail closed, on its port only.
    expect(await check(["203.0.113.9"], 8080)).toBe("203.0.113.9");
    expect(await check(["127.0.0.1"], 8080)).toBe("127.0.0.1");
    expect(check(["127.0.0.1"], 8081)).toBeUndefined();
    expect(resolved).toBe(2);
    failing = false;
    expect(await check(["203.0.113.9"], 8080)).toBeUndefined();
    expect(await check(["127.0.0.1"], 8080)).toBe("127.0.0.1");
  });

  it("refuses a manifest on the core's port at registration while the listener's name does not resolve: 503", async () => {
    const refuse = createCoreAddressCheck({
      listener: () => ({ host: "core.local", port: 8080 }),
      resolve: async () => {
        throw new Error("EAI_AGAIN");
      },
      interfaces: () => [],
    });
    const err = await refuse("plugin.test", ["203.0.113.9"], 8080).then(
      () => undefined,
      (e: unknown) => e as DomainError,
    );
    expect([err?.kind, err?.reason]).toEqual(["unavailable", "CORE_ADDRESS_UNKNOWN"]);
    await expect(refuse("plugin.test", ["203.0.113.9"], 8081)).resolves.toBeUndefined();
  });

  it("refuses nothing before the core listens", () => {
    const check = createCoreDialCheck({
      listener: () => undefined,
      resolve: async () => [],
      interfaces: () => [],
    });
    expect(check(["127.0.0.1"], 8080)).toBeUndefined();
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
