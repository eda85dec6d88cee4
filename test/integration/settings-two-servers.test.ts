import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postgresUrlFor, twoHandlesOnOneSchema } from "../support/database.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * Two servers, each with its own pool and listening connection, on one PostgreSQL: a
 * change made through one applies on the other within a second, by LISTEN/NOTIFY (the
 * version poll is set to a minute here, so it cannot be what delivers it).
 */

const url = postgresUrlFor("settings-two-servers");
const password = "settings-shared-password";

describe.skipIf(!url)("settings on two servers sharing one PostgreSQL", () => {
  let a: TestServer;
  let b: TestServer;
  let headers: Record<string, string> = {};

  beforeAll(async () => {
    const [dbA, dbB] = await twoHandlesOnOneSchema(url ?? "");
    const env = { LOG_LEVEL: "info" };
    b = await startTestServer({ db: dbB, env, settingsPollIntervalMs: 60_000 });
    a = await startTestServer({ db: dbA, env, settingsPollIntervalMs: 60_000 });
    await a.createUser("root", password, ["admin"]);
    const key = await a.createApiKey(["settings:read", "settings:write"]);
    const res = await fetch(`${a.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "root", password }),
    });
    const { token } = (await res.json()) as { token: string };
    headers = {
      authorization: `Bearer ${token}`,
      "x-api-key": key,
      "content-type": "application/json",
    };
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it("applies log_level and auth.* set on A to B within one second", async () => {
    const changes: string[][] = [];
    const stop = b.core.settings.subscribe((_, changed) => changes.push([...changed]));
    expect(b.core.settings.current().values.log_level).toBe("info");
    const res = await fetch(`${a.url}/api/admin/settings`, {
      method: "POST",
      headers,
      body: JSON.stringify({ log_level: "debug", "auth.mfa_required": true }),
    });
    expect(res.status).toBe(200);
    const waited = await until(() => b.core.settings.current().values.log_level === "debug", 1_000);
    expect(waited).toBeLessThan(1_000);
    expect(b.core.settings.current().values["auth.mfa_required"]).toBe(true);
    expect(changes).toEqual([["log_level", "auth.mfa_required"]]);
    const onB = await fetch(`${b.url}/api/admin/settings`, { headers });
    expect(onB.status).toBe(200);
    expect(await onB.json()).toMatchObject({ settings: { log_level: "debug" } });
    // B's root logger follows: a key refused for a wrong secret is logged at debug there.
    const mark = b.logs.length;
    const key = headers["x-api-key"] ?? "";
    const wrongSecret = `${key.slice(0, -1)}${key.endsWith("A") ? "B" : "A"}`;
    const refused = await fetch(`${b.url}/api/admin/settings`, {
      headers: { ...headers, "x-api-key": wrongSecret },
    });
    expect(refused.status).toBe(401);
    expect(b.logs.slice(mark).some((l) => l.includes('"level":"debug"'))).toBe(true);
    stop();
  });

  it("applies http.cors_allowed_origins set on A to B's CORS answers within one second", async () => {
    const origin = "https://app.example.com";
    const preflightOnB = () =>
      fetch(`${b.url}/api/admin/settings`, {
        method: "OPTIONS",
        headers: { origin, "access-control-request-method": "GET" },
      });
    expect((await preflightOnB()).headers.get("access-control-allow-origin")).toBeNull();
    const set = (value: string | null) =>
      fetch(`${a.url}/api/admin/settings`, {
        method: "POST",
        headers,
        body: JSON.stringify({ "http.cors_allowed_origins": value }),
      });
    expect((await set(origin)).status).toBe(200);
    const key = "http.cors_allowed_origins";
    await until(() => b.core.settings.current().values[key] === origin, 1_000);
    const allowed = await preflightOnB();
    expect(allowed.status).toBe(204);
    expect(allowed.headers.get("access-control-allow-origin")).toBe(origin);
    expect((await set(null)).status).toBe(200);
    await until(() => b.core.settings.current().values[key] === "", 1_000);
    expect((await preflightOnB()).headers.get("access-control-allow-origin")).toBeNull();
  });

  it("is told of a change made while its listening connection was cut", async () => {
    // Cut B's LISTEN connection from the server side; it reconnects and re-reads.
    await a.core.db.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'traitgate-listen' AND pid <> pg_backend_pid()",
    );
    const res = await fetch(`${a.url}/api/admin/settings`, {
      method: "POST",
      headers,
      body: JSON.stringify({ "auth.token_ttl_seconds": 600 }),
    });
    expect(res.status).toBe(200);
    await until(() => b.core.settings.current().values["auth.token_ttl_seconds"] === 600, 5_000);
  });
});
