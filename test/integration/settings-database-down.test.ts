import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate, openDatabase } from "../../src/storage/index.js";
import { startTcpProxy, type TcpProxy } from "../settings/tcp-proxy.js";
import { openTestPostgres, postgresUrlFor, testSchemaName } from "../support/database.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The core on PostgreSQL reached through a TCP proxy the test stops: settings calls answer
 * 503 `unavailable` within the database bounds (acquire + statement timeout) instead of
 * hanging, and answer 200 again once the database is back, without a restart.
 */

const url = postgresUrlFor("settings-database-down");

const password = "settings-outage-password";
const acquireTimeoutMs = 800;
const statementTimeoutMs = 1_200;
/** The slowest acceptable answer while the database is away: the bound plus slack. */
const boundMs = acquireTimeoutMs + statementTimeoutMs + 1_000;

describe.skipIf(!url)("settings while the database is unavailable", () => {
  let owner: Database;
  let proxy: TcpProxy;
  let server: TestServer;
  let headers: Record<string, string> = {};

  beforeAll(async () => {
    const target = new URL(url ?? "");
    const schema = testSchemaName();
    owner = await openTestPostgres(url ?? "", schema);
    await migrate(owner, silentLogger);
    proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
    const proxied = new URL(target);
    proxied.hostname = "127.0.0.1";
    proxied.port = String(proxy.port);
    const db = await openDatabase({
      connection: proxied.toString(),
      schema,
      acquireTimeoutMs,
      statementTimeoutMs,
      log: silentLogger,
    });
    server = await startTestServer({ db });
    await server.createUser("root", password, ["admin"]);
    const key = await server.createApiKey(["settings:read", "settings:write"]);
    const res = await fetch(`${server.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "root", password }),
    });
    const { token } = (await res.json()) as { token: string };
    headers = { authorization: `Bearer ${token}`, "x-api-key": key };
  });
  afterAll(async () => {
    await proxy?.start().catch(() => {});
    await server?.close();
    await proxy?.close();
    await owner?.close();
  });

  async function timed(method: "GET" | "POST", body?: string) {
    const started = performance.now();
    const res = await fetch(`${server.url}/api/admin/settings`, {
      method,
      headers: { ...headers, "content-type": "application/json" },
      ...(body === undefined ? {} : { body }),
    });
    const json = (await res.json()) as Record<string, unknown>;
    return { status: res.status, body: json, ms: performance.now() - started };
  }

  it("answers 503 at once when the port refuses, and 200 again when it is back", async () => {
    expect((await timed("GET")).status).toBe(200);
    await proxy.stop();
    const down = await timed("GET");
    expect(down.status).toBe(503);
    expect(down.body.code).toBe("unavailable");
    expect(String(down.body.message)).toMatch(/database|audit log/);
    expect(down.ms).toBeLessThan(boundMs);
    const write = await timed("POST", '{"rag.top_k_default": 9}');
    expect(write.status).toBe(503);

    await proxy.start();
    const up = await timed("GET");
    expect(up.status).toBe(200);
    // The refused write did not happen behind the client's back.
    expect(up.body).toMatchObject({ settings: { "rag.top_k_default": 5 } });
    expect((await timed("POST", '{"rag.top_k_default": 9}')).status).toBe(200);
  });

  it("answers 503 within the timeout when the database accepts and never answers", async () => {
    await proxy.stop();
    await proxy.start({ blackHole: true });
    const down = await timed("GET");
    expect(down.status).toBe(503);
    expect(down.body.code).toBe("unavailable");
    expect(down.ms).toBeLessThan(boundMs);
    const write = await timed("POST", '{"rag.top_k_default": 11}');
    expect(write.status).toBe(503);
    expect(write.ms).toBeLessThan(boundMs);

    await proxy.stop();
    await proxy.start();
    const up = await timed("GET");
    expect(up.status).toBe(200);
    expect(up.body).toMatchObject({ settings: { "rag.top_k_default": 9 } });
  });
});
