import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Deleting a plugin or a service account takes the allowlist entries naming it with it, at
 * once on the process that deleted it: a plugin or account re-created under the same name
 * right afterwards starts with no entries, even though the deleted one's were cached. The
 * clock stands still here, so no cached entry lapses by itself. On PGlite and on PostgreSQL
 * (TEST_DATABASE_URL).
 */

const password = "deleted-callers-admin-pw";
const system = { kind: "system" as const, id: "" };
const meta = { requestId: "deleted-callers-test" };

describe.each(databaseTargets())("a deleted caller's allowlist entries, on $name", (target) => {
  const now = Date.now();
  let server: TestServer;
  let admin = "";
  /** An API key for service account administration (token and key, like every admin API). */
  let key = "";

  beforeAll(async () => {
    server = await startTestServer({
      db: await openTestDatabase(target),
      clock: { now: () => now },
    });
    await server.createUser("root", password, ["admin"]);
    const login = await callJson(server.url, "/auth/login", { username: "root", password });
    admin = login.body.token as string;
    key = await server.createApiKey(["service_accounts:write"]);
    // Nothing listens on its port: an allowlisted call answers 503, any other 403.
    await register("target");
  });
  afterAll(async () => server?.close());

  function register(id: string) {
    return server.core.plugins.register(
      system,
      meta,
      {
        id,
        name: id,
        pluginType: "internal",
        endpoints: { ping: "/ping" },
        host: "127.0.0.1",
        port: 9,
        traits: [],
      },
      false,
    );
  }

  const allow = (caller: string, to: string) =>
    server.core.allowlist.put(system, meta, { caller, target: to, operations: ["ping"] });

  /** What the gateway finds for the pair (through the allowlist's cache). */
  const allowed = async (caller: string, to: string) => [
    ...(await server.core.allowlist.operationsFor(caller, to)),
  ];

  /** A gateway call of `target`'s `ping` as `caller`. */
  async function ping(token: string, caller: string) {
    const res = await callJson(
      server.url,
      "/gateway/target/ping",
      { caller_plugin: caller, payload: {} },
      { token },
    );
    return [res.status, res.reason];
  }

  async function createAccount(name: string) {
    const res = await callJson(
      server.url,
      "/api/admin/service-accounts",
      { name, roles: ["service"] },
      { token: admin, headers: { "x-api-key": key } },
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const account = res.body.service_account as { service_account_id: string };
    const token = await callJson(server.url, "/auth/token", {
      grant_type: "client_credentials",
      client_id: name,
      client_secret: res.body.client_secret,
    });
    expect(token.status).toBe(200);
    return { id: account.service_account_id, token: token.body.access_token as string };
  }

  it("gives a service account re-created under a deleted one's name none of its entries", async () => {
    const first = await createAccount("sa-again");
    await allow("sa-again", "target");
    expect(await ping(first.token, "sa-again")).toEqual([503, "PLUGIN_UNAVAILABLE"]);
    expect(await allowed("sa-again", "target")).toEqual(["ping"]);
    const deleted = await callJson(
      server.url,
      `/api/admin/service-accounts/${first.id}`,
      undefined,
      { token: admin, method: "DELETE", headers: { "x-api-key": key } },
    );
    expect(deleted.status).toBe(200);
    const second = await createAccount("sa-again");
    expect(await allowed("sa-again", "target")).toEqual([]);
    expect(await ping(second.token, "sa-again")).toEqual([403, "NOT_ALLOWLISTED"]);
  });

  it("gives a plugin re-registered under a deleted one's id none of its entries, as caller or as target", async () => {
    const first = await register("plugin-again");
    await allow("plugin-again", "target");
    const account = await createAccount("sa-caller");
    await allow("sa-caller", "plugin-again");
    expect(await ping(first.credentials.credential, "plugin-again")).toEqual([
      503,
      "PLUGIN_UNAVAILABLE",
    ]);
    expect(await allowed("plugin-again", "target")).toEqual(["ping"]);
    expect(await allowed("sa-caller", "plugin-again")).toEqual(["ping"]);
    await server.core.plugins.delete(system, meta, "plugin-again");
    const second = await register("plugin-again");
    expect(await allowed("plugin-again", "target")).toEqual([]);
    expect(await allowed("sa-caller", "plugin-again")).toEqual([]);
    expect(await ping(second.credentials.credential, "plugin-again")).toEqual([
      403,
      "NOT_ALLOWLISTED",
    ]);
    const asTarget = await callJson(
      server.url,
      "/gateway/plugin-again/ping",
      { caller_plugin: "sa-caller", payload: {} },
      { token: account.token },
    );
    expect([asTarget.status, asTarget.reason]).toEqual([403, "NOT_ALLOWLISTED"]);
  });
});
