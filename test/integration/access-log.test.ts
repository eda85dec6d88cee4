import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import { GatewayService } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { type EchoPlugin, startEchoPlugin } from "../support/echo-plugin.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * The access log at LOG_LEVEL=info: exactly one line per call, successful or refused at any
 * stage (before a route matched, by the transport, by authentication, by validation, by the
 * handler), saying who called what, when, from where, and with which outcome (gRPC code,
 * HTTP status, ErrorInfo reason). And every call that reaches the gateway's method leaves
 * exactly one operator_call event, whatever refused it.
 */

const password = "access-log-admin-password";
const maxBodyBytes = 4096;
let server: TestServer;
let echo: EchoPlugin;
let rootId = "";
let admin = { token: "", key: "" };
let aiCore = { id: "", token: "" };

interface AccessLine {
  level: string;
  msg: string;
  request_id: string;
  protocol: string;
  rpc?: string;
  route?: string;
  principal_type: string;
  principal_id?: string;
  api_key_id?: string;
  client_address: string;
  code: string;
  http_status: number;
  reason?: string;
  duration_ms: number;
}

/** The access lines of one request (by its x-request-id), once it has one. */
async function accessLines(requestId: string): Promise<AccessLine[]> {
  const find = () =>
    server.logs
      .map((l) => JSON.parse(l) as Partial<AccessLine>)
      .filter((l) => l.msg === "call" && l.request_id === requestId) as AccessLine[];
  await until(() => find().length > 0, 5000).catch(() => undefined);
  // Anything written twice would be written by now (the answer is already out).
  await new Promise((r) => setTimeout(r, 20));
  return find();
}

async function operatorCalls(requestId: string) {
  const read = async () =>
    (
      await server.core.db.query<{
        actor_type: string;
        actor_id: string | null;
        target: string;
        outcome: string;
        details: Record<string, unknown>;
      }>(
        "SELECT actor_type, actor_id, target, outcome, details FROM audit_events WHERE action = 'operator_call' AND request_id = $1",
        [requestId],
      )
    ).rows;
  for (let i = 0; i < 250 && (await read()).length === 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 20));
  return read();
}

const adminCall = (path: string, body: unknown, method = "POST") =>
  callJson(server.url, path, body, {
    token: admin.token,
    method,
    headers: { "x-api-key": admin.key },
  });

beforeAll(async () => {
  server = await startTestServer({
    env: { LOG_LEVEL: "info", GATEWAY_TIMEOUT_MS: "300", MAX_BODY_BYTES: String(maxBodyBytes) },
  });
  rootId = await server.createUser("root", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "root", password });
  admin = {
    token: login.body.token as string,
    key: await server.createApiKey(["plugins:write", "operator:write", "audit:read"]),
  };
  const sa = await callJson(
    server.url,
    "/api/admin/service-accounts",
    { name: "ai-core", roles: ["service"] },
    { token: admin.token },
  );
  const issued = await callJson(server.url, "/auth/token", {
    grant_type: "client_credentials",
    client_id: "ai-core",
    client_secret: sa.body.client_secret,
  });
  aiCore = {
    id: (sa.body.service_account as { service_account_id: string }).service_account_id,
    token: issued.body.access_token as string,
  };
  const endpoints = { echo: "/echo", slow: "/slow", fail: "/fail", rag_query: "/rag/query" };
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
    { caller: "ai-core", target: "echo", operations: ["rag_query", "slow", "fail"] },
    "PUT",
  );
  await adminCall("/admin/plugins", {
    id: "ghost",
    plugin_type: "internal",
    endpoints: { rag_query: "/rag/query" },
    port: await closedPort(),
  });
  await adminCall(
    "/admin/operator/allowlist",
    { caller: "ai-core", target: "ghost", operations: ["rag_query"] },
    "PUT",
  );
});

afterAll(async () => {
  await echo?.stop();
  await server?.close();
});

describe("the access log at LOG_LEVEL=info", () => {
  it("writes one line for a successful audit-log read: who, what, from where, the outcome", async () => {
    const res = await callJson(server.url, "/api/admin/audit?page_size=5", undefined, {
      method: "GET",
      token: admin.token,
      headers: { "x-api-key": admin.key, "x-request-id": "acc-audit-read" },
    });
    expect(res.status).toBe(200);
    const lines = await accessLines("acc-audit-read");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "info",
      protocol: "rest",
      rpc: "traitgate.admin.v1.AuditService/ListAuditEvents",
      route: "GET /api/admin/audit",
      principal_type: "user",
      principal_id: rootId,
      code: "ok",
      http_status: 200,
    });
    expect(lines[0]?.client_address).toMatch(/127\.0\.0\.1$/);
    expect(typeof lines[0]?.api_key_id).toBe("string");
    expect(typeof lines[0]?.duration_ms).toBe("number");
    expect(lines[0]?.reason).toBeUndefined();
  });

  it("shows the outcome of refused calls on every protocol: code, HTTP status, reason", async () => {
    const login = await callJson(
      server.url,
      "/auth/login",
      { username: "root", password: "not-the-password" },
      { headers: { "x-request-id": "acc-login-refused" } },
    );
    expect(login.status).toBe(401);
    const headers = { authorization: `Bearer ${admin.token}` };
    for (const [protocol, transport] of [
      ["grpc", createGrpcTransport({ baseUrl: server.url })],
      ["connect", createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" })],
    ] as [string, Transport][]) {
      const audit = createClient(AuditService, transport);
      const err = await audit
        .listAuditEvents({}, { headers: { ...headers, "x-request-id": `acc-${protocol}` } })
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(err?.code).toBe(Code.Unauthenticated);
    }
    expect(await accessLines("acc-login-refused")).toEqual([
      expect.objectContaining({
        level: "info",
        rpc: "traitgate.identity.v1.IdentityService/Login",
        principal_type: "anonymous",
        code: "unauthenticated",
        http_status: 401,
        reason: "INVALID_CREDENTIALS",
      }),
    ]);
    expect(await accessLines("acc-grpc")).toEqual([
      expect.objectContaining({
        protocol: "grpc",
        rpc: "traitgate.admin.v1.AuditService/ListAuditEvents",
        principal_type: "user",
        principal_id: rootId,
        code: "unauthenticated",
        reason: "API_KEY_MISSING",
      }),
    ]);
    expect(await accessLines("acc-connect")).toEqual([
      expect.objectContaining({
        protocol: "connect",
        code: "unauthenticated",
        http_status: 401,
        reason: "API_KEY_MISSING",
      }),
    ]);
  });

  it("writes one line for calls answered before any handler ran", async () => {
    const cases: [string, string, unknown, Partial<AccessLine>][] = [
      ["acc-no-route", "/no/such/route", {}, { code: "not_found", http_status: 404 }],
      [
        "acc-malformed",
        "/auth/login",
        "{not json",
        {
          rpc: "traitgate.identity.v1.IdentityService/Login",
          code: "invalid_argument",
          http_status: 400,
          reason: "MALFORMED_JSON",
        },
      ],
    ];
    for (const [id, path, body] of cases) {
      const res = await fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-request-id": id },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      expect(res.headers.get("x-request-id")).toBe(id);
    }
    for (const [id, , , want] of cases) {
      expect(await accessLines(id)).toEqual([
        expect.objectContaining({ protocol: "rest", ...want }),
      ]);
    }
  });
});

describe("gateway calls refused at any stage", () => {
  const rpc = "traitgate.gateway.v1.GatewayService/Call";
  const big = { caller_plugin: "ai-core", payload: { note: "x".repeat(maxBodyBytes) } };

  /** One REST gateway call with its own request id. */
  const rest = (id: string, path: string, body: unknown, token = aiCore.token) =>
    callJson(server.url, path, body, { token, headers: { "x-request-id": id } });
  const call = (payload: object = {}, caller = "ai-core") => ({ caller_plugin: caller, payload });

  it.each([
    {
      stage: "size",
      send: (id: string) => rest(id, "/gateway/echo/rag_query", big),
      want: [413, "BODY_TOO_LARGE", "resource_exhausted", "denied", "rag_query"],
    },
    {
      stage: "authentication",
      send: (id: string) => rest(id, "/gateway/echo/rag_query", call(), ""),
      want: [401, "MISSING", "unauthenticated", "denied", "rag_query"],
    },
    {
      stage: "validation",
      send: (id: string) => rest(id, "/gateway/echo/rag_query", call({}, "AI CORE")),
      want: [400, "INVALID_FIELD", "invalid_argument", "denied", "rag_query"],
    },
    {
      stage: "allowlist",
      send: (id: string) => rest(id, "/gateway/echo/echo", call()),
      want: [403, "NOT_ALLOWLISTED", "permission_denied", "denied", "echo"],
    },
    {
      stage: "policy",
      send: (id: string) => rest(id, "/gateway/echo/rag_query", call({ classification: "phi" })),
      want: [403, "POLICY_DENIED", "permission_denied", "denied", "rag_query"],
    },
    {
      stage: "plugin down",
      send: (id: string) => rest(id, "/gateway/ghost/rag_query", call()),
      want: [503, "PLUGIN_UNAVAILABLE", "unavailable", "error", "rag_query"],
    },
    {
      stage: "timeout",
      send: (id: string) => rest(id, "/gateway/echo/slow", call({ ms: 3000 })),
      want: [504, "PLUGIN_TIMEOUT", "deadline_exceeded", "error", "slow"],
    },
    {
      stage: "nothing",
      send: (id: string) => rest(id, "/gateway/echo/rag_query", call({ top_k: 1 })),
      want: [200, "", "ok", "success", "rag_query"],
    },
  ] as const)(
    "refused by $stage: one operator_call event, one access line",
    async ({ stage, send, want }) => {
      const [status, reason, code, outcome, operation] = want;
      // The body of a call refused for its size was never read; a malformed name is not kept.
      const callerDetail: Record<string, string> = { size: "", validation: "<invalid>" };
      const id = `acc-gw-${stage.replaceAll(" ", "-")}`;
      const res = await send(id);
      expect([res.status, res.reason ?? ""]).toEqual([status, reason]);
      const events = await operatorCalls(id);
      expect(events).toHaveLength(1);
      const anonymous = stage === "authentication";
      expect(events[0]).toMatchObject({
        actor_type: anonymous ? "anonymous" : "service",
        actor_id: anonymous ? null : aiCore.id,
        outcome,
        details: { status, reason, operation, caller: callerDetail[stage] ?? "ai-core" },
      });
      const target = stage === "plugin down" ? "plugin:ghost" : "plugin:echo";
      expect(events[0]?.target).toBe(target);
      const lines = await accessLines(id);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({
        protocol: "rest",
        rpc,
        route: "POST /gateway/{plugin_id}/{operation}",
        principal_type: anonymous ? "anonymous" : "service",
        code,
        http_status: status,
        ...(reason ? { reason } : {}),
      });
      if (!anonymous) expect(lines[0]?.principal_id).toBe(aiCore.id);
    },
  );

  it("records a body too large for gRPC and Connect callers too", async () => {
    for (const [protocol, transport] of [
      ["grpc", createGrpcTransport({ baseUrl: server.url })],
      ["connect", createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" })],
    ] as [string, Transport][]) {
      const id = `acc-gw-size-${protocol}`;
      const gateway = createClient(GatewayService, transport);
      const err = await gateway
        .call(
          {
            pluginId: "echo",
            operation: "rag_query",
            callerPlugin: "ai-core",
            payload: big.payload,
          },
          { headers: { authorization: `Bearer ${aiCore.token}`, "x-request-id": id } },
        )
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(err?.code).toBe(Code.ResourceExhausted);
      const events = await operatorCalls(id);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({
        actor_type: "service",
        actor_id: aiCore.id,
        outcome: "denied",
        details: { status: 429, reason: "RESOURCE_EXHAUSTED" },
      });
      const lines = await accessLines(id);
      expect(lines).toEqual([
        expect.objectContaining({
          protocol,
          rpc,
          principal_type: "service",
          code: "resource_exhausted",
        }),
      ]);
    }
  });
});

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}
