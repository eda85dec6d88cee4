import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openTestPostgres } from "../support/database.js";
import { type EchoPlugin, startEchoPlugin } from "../support/echo-plugin.js";
import { callJson } from "../support/http.js";
import { parseExposition, type Sample, sampleValue, scrape } from "../support/prometheus.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Prometheus metrics at /metrics (issue 16, item 5), scraped from a real server after real
 * calls: a login, refused logins until the throttle answers 429, a refused admin call, a
 * policy decision, gateway calls to the echo plugin (a separate process). Markers planted in
 * everything a caller controls (a username, a password, a path parameter, a plugin id, an
 * operation, a request id) never show up in a label.
 */

const marker = "mtrxmarker";
const password = "metrics-admin-password";
let server: TestServer;
let echo: EchoPlugin;
let admin = { token: "", key: "" };
let aiCoreToken = "";

const rpcLabels = (service: string, method: string, code: string) => ({
  service: `traitgate.${service}`,
  method,
  protocol: "rest",
  code,
});

async function scrapeServer(): Promise<Sample[]> {
  return (await scrape(`${server.url}/metrics`)).samples;
}

beforeAll(async () => {
  server = await startTestServer({ env: { LOG_LEVEL: "info" } });
  await server.createUser("metrics-admin", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "metrics-admin", password });
  admin = {
    token: login.body.token as string,
    key: await server.createApiKey([
      "plugins:write",
      "operator:write",
      "users:read",
      "service_accounts:write",
    ]),
  };
  const adminCall = (path: string, body: unknown, method = "POST") =>
    callJson(server.url, path, body, {
      token: admin.token,
      method,
      headers: { "x-api-key": admin.key },
    });
  const sa = await adminCall("/api/admin/service-accounts", {
    name: "ai-core",
    roles: ["service"],
  });
  const issued = await callJson(server.url, "/auth/token", {
    grant_type: "client_credentials",
    client_id: "ai-core",
    client_secret: sa.body.client_secret,
  });
  aiCoreToken = issued.body.access_token as string;
  const endpoints = { echo: "/echo", fail: "/fail" };
  const registered = await adminCall("/admin/plugins", {
    id: "echo",
    plugin_type: "internal",
    endpoints,
  });
  echo = await startEchoPlugin(
    (registered.body.credentials as { core_secret: string }).core_secret,
  );
  await adminCall(
    "/admin/plugins/echo",
    { plugin_type: "internal", endpoints, port: echo.port },
    "PUT",
  );
  await adminCall(
    "/admin/operator/allowlist",
    { caller: "ai-core", target: "echo", operations: ["echo", "fail"] },
    "PUT",
  );
});

afterAll(async () => {
  await echo?.stop();
  await server?.close();
});

describe("GET /metrics after real calls", () => {
  it("counts calls by service, method, protocol and code, with their durations", async () => {
    const before = await scrapeServer();
    const ok = rpcLabels("identity.v1.IdentityService", "Login", "ok");
    const okBefore = sampleValue(before, "traitgate_rpc_requests_total", ok) ?? 0;
    const login = await callJson(server.url, "/auth/login", {
      username: "metrics-admin",
      password,
    });
    expect(login.status).toBe(200);
    // A refused call: an admin API without a token.
    const refused = await callJson(server.url, "/api/admin/users", undefined, { method: "GET" });
    expect(refused.status).toBe(401);

    const after = await scrapeServer();
    expect(sampleValue(after, "traitgate_rpc_requests_total", ok)).toBe(okBefore + 1);
    expect(
      sampleValue(after, "traitgate_rpc_request_duration_seconds_count", ok),
    ).toBeGreaterThanOrEqual(okBefore + 1);
    expect(sampleValue(after, "traitgate_rpc_request_duration_seconds_sum", ok)).toBeGreaterThan(0);
    expect(
      sampleValue(
        after,
        "traitgate_rpc_requests_total",
        rpcLabels("identity.v1.UserAdminService", "ListUsers", "unauthenticated"),
      ),
    ).toBe(1);
    // A path that is no method: "none", never the path.
    await fetch(`${server.url}/no/such/${marker}`);
    expect(
      sampleValue(await scrapeServer(), "traitgate_rpc_requests_total", {
        service: "none",
        method: "none",
        code: "not_found",
      }),
    ).toBeGreaterThanOrEqual(1);
  });

  it("counts the login throttle's refusals", async () => {
    const labels = { service: "traitgate.identity.v1.IdentityService", method: "Login" };
    const before =
      sampleValue(await scrapeServer(), "traitgate_throttled_requests_total", labels) ?? 0;
    let throttled = 0;
    for (let i = 0; i < 8 && throttled === 0; i++) {
      const res = await callJson(server.url, "/auth/login", {
        username: `${marker}-user`,
        password: `${marker}-password`,
      });
      if (res.status === 429) throttled++;
      else expect(res.status).toBe(401);
    }
    expect(throttled).toBe(1);
    const after = await scrapeServer();
    expect(sampleValue(after, "traitgate_throttled_requests_total", labels)).toBe(before + 1);
    expect(
      sampleValue(
        after,
        "traitgate_rpc_requests_total",
        rpcLabels("identity.v1.IdentityService", "Login", "resource_exhausted"),
      ),
    ).toBe(1);
  });

  it("counts policy decisions by decision and reason", async () => {
    const reply = await callJson(
      server.url,
      "/api/policy/evaluate",
      { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] },
      { token: admin.token },
    );
    expect(reply.status).toBe(200);
    const labels = {
      decision: reply.body.decision as string,
      reason: reply.body.reason_code as string,
    };
    expect(labels).toEqual({ decision: "allow", reason: "RULE_ALLOW" });
    expect(sampleValue(await scrapeServer(), "traitgate_policy_decisions_total", labels)).toBe(1);

    // A batch counts each of its decisions, however they are told (in runs of answers alike).
    const allow = { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] };
    const none = { traits: [], context: "SEARCH" };
    const batch = await callJson(
      server.url,
      "/api/policy/evaluate-batch",
      { requests: [allow, allow, none, allow, none, none] },
      { token: admin.token },
    );
    expect(batch.status).toBe(200);
    const after = await scrapeServer();
    expect(sampleValue(after, "traitgate_policy_decisions_total", labels)).toBe(4);
    expect(
      sampleValue(after, "traitgate_policy_decisions_total", {
        decision: "deny",
        reason: "NO_MATCH",
      }),
    ).toBe(3);
  });

  it("counts gateway calls by plugin, operation, outcome and reason, with the plugin's latency", async () => {
    const gateway = (plugin: string, operation: string, payload: object = {}) =>
      callJson(
        server.url,
        `/gateway/${plugin}/${operation}`,
        { caller_plugin: "ai-core", payload },
        { token: aiCoreToken, headers: { "x-request-id": `${marker}-request` } },
      );
    expect((await gateway("echo", "echo", { note: marker })).status).toBe(200);
    expect((await gateway("echo", "fail", { status: 502 })).status).toBe(500);
    // Names the registry does not know stay out of the labels.
    expect((await gateway(`${marker}-plugin`, "echo")).status).toBe(404);
    expect((await gateway("echo", `${marker}_op`)).status).toBe(404);

    const samples = await scrapeServer();
    const calls = (labels: Record<string, string>) =>
      sampleValue(samples, "traitgate_gateway_calls_total", labels);
    expect(calls({ plugin: "echo", operation: "echo", outcome: "success", reason: "ok" })).toBe(1);
    expect(
      calls({ plugin: "echo", operation: "fail", outcome: "failure", reason: "PLUGIN_ERROR" }),
    ).toBe(1);
    expect(
      calls({
        plugin: "unknown",
        operation: "unknown",
        outcome: "denied",
        reason: "PLUGIN_NOT_FOUND",
      }),
    ).toBe(1);
    expect(
      calls({
        plugin: "echo",
        operation: "unknown",
        outcome: "denied",
        reason: "OPERATION_NOT_FOUND",
      }),
    ).toBe(1);
    const upstream = { plugin: "echo", operation: "echo" };
    expect(
      sampleValue(samples, "traitgate_gateway_upstream_duration_seconds_count", upstream),
    ).toBe(1);
    expect(
      sampleValue(samples, "traitgate_gateway_upstream_duration_seconds_sum", upstream),
    ).toBeGreaterThan(0);
    // Refused before the plugin was called: no upstream latency.
    expect(
      sampleValue(samples, "traitgate_gateway_upstream_duration_seconds_count", {
        plugin: "unknown",
        operation: "unknown",
      }),
    ).toBeUndefined();
  });

  it("shows the audit writer's batches, commit latency and queue", async () => {
    const samples = await scrapeServer();
    const events = sampleValue(samples, "traitgate_audit_batch_events_sum") ?? 0;
    const batches = sampleValue(samples, "traitgate_audit_batch_events_count") ?? 0;
    // Every event the server committed so far went through a batch.
    const { rows } = await server.core.db.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM audit_events",
    );
    expect(events).toBe(server.core.audit.stats().events);
    expect(events).toBeLessThanOrEqual(Number(rows[0]?.n));
    expect(batches).toBeGreaterThan(0);
    expect(batches).toBeLessThanOrEqual(events);
    expect(
      sampleValue(samples, "traitgate_audit_commit_duration_seconds_count", { outcome: "ok" }),
    ).toBe(batches);
    expect(sampleValue(samples, "traitgate_audit_queue_events")).toBe(0);
    expect(sampleValue(samples, "traitgate_audit_refused_total")).toBe(0);
  });

  it("shows connections, the database's errors and the process's own metrics", async () => {
    const samples = await scrapeServer();
    expect(sampleValue(samples, "traitgate_connections_open")).toBeGreaterThanOrEqual(1);
    expect(sampleValue(samples, "traitgate_requests_in_flight")).toBeGreaterThanOrEqual(1);
    expect(sampleValue(samples, "traitgate_connections_refused_total")).toBe(0);
    expect(sampleValue(samples, "traitgate_db_errors_total", { kind: "timeout" })).toBe(0);
    expect(sampleValue(samples, "traitgate_db_errors_total", { kind: "connection" })).toBe(0);
    for (const name of [
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "nodejs_eventloop_lag_seconds",
      "nodejs_heap_size_used_bytes",
    ]) {
      expect(sampleValue(samples, name), name).toBeGreaterThanOrEqual(0);
    }
    // Only where the guard is installed (traitgate serve and demo; not in this test process).
    expect(sampleValue(samples, "traitgate_last_resort_errors_total")).toBeUndefined();
  });

  it("never carries user data in a label: usernames, passwords, paths, tokens, ids", async () => {
    // A path parameter and a request id that a caller chose.
    await callJson(server.url, `/api/admin/users/${marker}-user-id`, undefined, {
      method: "GET",
      token: admin.token,
      headers: { "x-api-key": admin.key, "x-request-id": `${marker}-rid` },
    });
    const { samples, text, contentType } = await scrape(`${server.url}/metrics`);
    expect(contentType).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(samples.length).toBeGreaterThan(100);
    expect(text).not.toContain(marker);
    const secrets = [admin.token, admin.key, aiCoreToken, password, "metrics-admin"];
    for (const sample of samples) {
      for (const [label, value] of Object.entries(sample.labels)) {
        for (const secret of secrets) expect(value).not.toContain(secret);
        if (sample.name.startsWith("traitgate_") && label !== "le") {
          // The server's own names only: services, methods, codes, reasons, registered plugins.
          expect(value).toMatch(/^[A-Za-z0-9_.-]+$/);
        }
      }
    }
  });
});

describe("who may read /metrics (default: loopback clients only)", () => {
  it("answers a loopback client, and refuses a request relayed by a proxy", async () => {
    const direct = await fetch(`${server.url}/metrics`);
    expect(direct.status).toBe(200);
    expect(direct.headers.get("cache-control")).toBe("no-store");
    for (const header of ["x-forwarded-for", "forwarded", "x-real-ip"]) {
      const relayed = await fetch(`${server.url}/metrics`, {
        headers: { [header]: header === "forwarded" ? "for=198.51.100.7" : "198.51.100.7" },
      });
      expect(relayed.status, header).toBe(403);
      const body = (await relayed.json()) as { details: { reason: string }[] };
      expect(body.details[0]?.reason).toBe("METRICS_LOOPBACK_ONLY");
    }
  });

  it("is not a method: other verbs get 405, and the scrape writes no access line", async () => {
    const post = await fetch(`${server.url}/metrics`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    const id = `${marker}-scrape`;
    await fetch(`${server.url}/metrics`, { headers: { "x-request-id": id } });
    expect(server.logs.some((l) => l.includes(id))).toBe(false);
  });
});

describe("METRICS_PORT and METRICS_TOKEN", () => {
  let own: TestServer;
  const token = "metrics-token-0123456789abcdef";

  beforeAll(async () => {
    own = await startTestServer({ env: { METRICS_PORT: "0", METRICS_TOKEN: token } });
  });
  afterAll(async () => {
    await own?.close();
  });

  it("serves the metrics on their own port only, to the bearer of the token", async () => {
    const url = own.core.metricsAt.url;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    expect(new URL(url).port).not.toBe(String(own.port));
    // Not on the main port any more: an unknown path there.
    expect((await fetch(`${own.url}/metrics`)).status).toBe(404);
    const none = await fetch(url);
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toBe('Bearer realm="metrics"');
    expect((await fetch(url, { headers: { authorization: "Bearer not-the-token" } })).status).toBe(
      401,
    );
    const { samples } = await scrape(url, { authorization: `Bearer ${token}` });
    expect(sampleValue(samples, "traitgate_connections_open")).toBeGreaterThanOrEqual(0);
    // A repeated Authorization is refused, whichever comes first (Node keeps the first).
    const twice = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(url, {
        headers: [
          "Host",
          new URL(url).host,
          "Authorization",
          `Bearer ${token}`,
          "Authorization",
          "Bearer other",
        ],
      });
      req.on("response", (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      req.end();
    });
    expect(twice).toBe(401);
    expect((await fetch(url.replace(/\/metrics$/, "/other"))).status).toBe(404);
    // Said where the server says it listens.
    const line = own.logs.map((l) => JSON.parse(l)).find((l) => l.msg === "traitgate listening");
    expect(line).toMatchObject({ metrics: url });
    expect(JSON.stringify(own.logs)).not.toContain(token);
  });

  it("keeps each core's metrics apart (each has its own registry)", async () => {
    const mine = parseExposition(await own.core.metrics.registry.metrics());
    expect(sampleValue(mine, "traitgate_gateway_calls_total", { plugin: "echo" })).toBeUndefined();
  });
});

describe("on PostgreSQL", () => {
  const url = process.env.TEST_DATABASE_URL?.trim();
  let pg: TestServer | undefined;
  afterAll(async () => {
    await pg?.close();
  });

  it.skipIf(!url)("shows the connection pool: open, idle, waiting, size", async () => {
    pg = await startTestServer({ db: await openTestPostgres(url ?? "") });
    const samples = parseExposition(await pg.core.metrics.registry.metrics());
    expect(sampleValue(samples, "traitgate_db_pool_connections")).toBeGreaterThanOrEqual(1);
    expect(sampleValue(samples, "traitgate_db_pool_idle_connections")).toBeGreaterThanOrEqual(0);
    expect(sampleValue(samples, "traitgate_db_pool_waiting_requests")).toBe(0);
    expect(sampleValue(samples, "traitgate_db_pool_max_connections")).toBe(10);
    expect(sampleValue(samples, "traitgate_db_pool_connection_failures_total")).toBe(0);
    // PGlite has no pool: no such series there.
    const embedded = parseExposition(await server.core.metrics.registry.metrics());
    expect(sampleValue(embedded, "traitgate_db_pool_connections")).toBeUndefined();
  });
});
