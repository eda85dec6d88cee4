import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GatewayService } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { allScopes } from "../../src/apikeys/scopes.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * The acceptance check: the server log of a whole scenario, at debug level, holds
 * no payload, plugin reply, password, token, API key, TOTP secret, recovery code or other
 * request data, while every call has its access line with its outcome. Markers are planted
 * in everything a caller or a plugin sends; the secrets the server issues are collected.
 */

const maxBodyBytes = 16_384;
const mark = (what: string) => `MARK-${what}-5e0d`;
/** Everything that must never reach a log line. */
const secrets = new Set<string>();
const planted = (what: string) => {
  const value = mark(what);
  secrets.add(value);
  return value;
};
const issued = (value: unknown): string => {
  expect(typeof value).toBe("string");
  secrets.add(value as string);
  return value as string;
};

let server: TestServer;
let plugin: Server;
const rootPassword = planted("root-password");
let admin = { token: "", key: "" };

/** The calls made, by request id, with the outcome their client saw. */
const made = new Map<string, { status: number; code: string; reason: string | undefined }>();
let seq = 0;

/** One REST call with its own request id; records the outcome the client saw. */
async function call(
  method: string,
  path: string,
  body?: unknown,
  auth: { token?: string; key?: string } = {},
  raw?: string,
) {
  const id = `sec-${++seq}`;
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      "x-request-id": id,
      ...(auth.token ? { authorization: `Bearer ${auth.token}` } : {}),
      ...(auth.key ? { "x-api-key": auth.key } : {}),
    },
    ...(raw !== undefined
      ? { body: raw }
      : body === undefined
        ? {}
        : { body: JSON.stringify(body) }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  const reason = (json.details as { reason?: string }[] | undefined)?.[0]?.reason;
  made.set(id, {
    status: res.status,
    code: res.ok ? "ok" : String(json.code),
    reason: res.ok ? undefined : reason,
  });
  return { status: res.status, body: json, reason };
}

const asAdmin = () => ({ token: admin.token, key: admin.key });

/** A plugin of the test's own: answers with its own marker, or fails with a marked body. */
function startMarkedPlugin(): Promise<number> {
  plugin = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const status = Number(/^\/fail\/(\d+)$/.exec(req.url ?? "")?.[1] ?? 200);
      const body =
        status === 200
          ? { answer: mark("plugin-reply") }
          : { error: mark(`plugin-error-${status}`), patient: mark("plugin-error-phi") };
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    });
  });
  for (const s of [200, 500, 502, 503]) {
    secrets.add(s === 200 ? mark("plugin-reply") : mark(`plugin-error-${s}`));
  }
  secrets.add(mark("plugin-error-phi"));
  return new Promise((resolve) =>
    plugin.listen(0, "127.0.0.1", () => resolve((plugin.address() as AddressInfo).port)),
  );
}

beforeAll(async () => {
  server = await startTestServer({ env: { MAX_BODY_BYTES: String(maxBodyBytes) } });
  expect(server.config.logLevel).toBe("debug");
  await server.createUser("root", rootPassword, ["admin"]);
  const login = await call("POST", "/auth/login", { username: "root", password: rootPassword });
  admin = {
    token: issued(login.body.token),
    key: issued(await server.createApiKey([...allScopes])),
  };
  issued(login.body.refresh_token);
});

afterAll(async () => {
  await new Promise<void>((r) => (plugin ? plugin.close(() => r()) : r()));
  await server?.close();
});

describe("the server log of a whole scenario", () => {
  it("identity: logins, refresh, MFA enrolment and activation, password change", async () => {
    const wrong = await call("POST", "/auth/login", {
      username: "root",
      password: planted("wrong-password"),
    });
    expect(wrong.status).toBe(401);
    const userPassword = planted("mia-password");
    const created = await call(
      "POST",
      "/api/admin/users",
      {
        username: "mia",
        email: `${mark("email")}@example.test`,
        password: userPassword,
        roles: ["viewer"],
      },
      asAdmin(),
    );
    secrets.add(`${mark("email")}@example.test`);
    expect(created.status).toBe(200);
    const first = await call("POST", "/auth/login", { username: "mia", password: userPassword });
    issued(first.body.token);
    const refresh = issued(first.body.refresh_token);
    const rotated = await call("POST", "/auth/refresh", { refresh_token: refresh });
    issued(rotated.body.token);
    issued(rotated.body.refresh_token);
    // A reused refresh token is refused, and revokes its family (the session above).
    expect((await call("POST", "/auth/refresh", { refresh_token: refresh })).status).toBe(401);
    const login = await call("POST", "/auth/login", { username: "mia", password: userPassword });
    const token = issued(login.body.token);
    issued(login.body.refresh_token);

    const enrol = await call("POST", "/auth/mfa/enroll", {}, { token });
    const secret = issued(enrol.body.secret);
    issued(enrol.body.otpauth_uri);
    const code = generateSync({ secret, epoch: Math.floor(Date.now() / 1000) });
    const activate = await call("POST", "/auth/mfa/activate", { code }, { token });
    expect(activate.status).toBe(200);
    const recovery = activate.body.recovery_codes as string[];
    expect(recovery.length).toBeGreaterThan(0);
    for (const c of recovery) issued(c);
    const withCode = await call("POST", "/auth/login", {
      username: "mia",
      password: userPassword,
      totp_code: recovery[0],
    });
    expect(withCode.status).toBe(200);
    const fresh = issued(withCode.body.token);
    issued(withCode.body.refresh_token);
    const changed = await call(
      "POST",
      "/auth/password",
      { current_password: userPassword, new_password: planted("mia-new-password") },
      { token: fresh },
    );
    expect(changed.status).toBe(200);
  });

  it("administration: an API key, a secret setting, a refused and a malformed update", async () => {
    const key = await call(
      "POST",
      "/api/admin/api-keys",
      { name: "log test", scopes: ["audit:read"] },
      asAdmin(),
    );
    expect(key.status).toBe(200);
    const created = issued(key.body.key);
    const settings = await call(
      "POST",
      "/api/admin/settings",
      { data_source: `postgres://app:${planted("db-password")}@db.example.test/app` },
      asAdmin(),
    );
    expect(settings.status).toBe(200);
    const refused = await call(
      "POST",
      "/api/admin/settings",
      { log_level: "debug" },
      { token: admin.token, key: created },
    );
    expect(refused.status).toBe(403);
    const malformed = await call(
      "POST",
      "/api/admin/settings",
      undefined,
      asAdmin(),
      `{"data_source": "${planted("malformed-body")}"`,
    );
    expect(malformed.status).toBe(400);
    // A key refused for a wrong secret is logged at debug (the run is logged at debug).
    const wrongSecret = `${created.slice(0, -1)}${created.endsWith("A") ? "B" : "A"}`;
    secrets.add(wrongSecret);
    const wrongKey = await call("GET", "/api/admin/audit", undefined, {
      token: admin.token,
      key: wrongSecret,
    });
    expect(wrongKey.status).toBe(401);
    expect((await call("GET", "/api/admin/audit?page_size=50", undefined, asAdmin())).status).toBe(
      200,
    );
  });

  it("the operator lane: payloads, replies, plugin error bodies, refusals, an oversized body", async () => {
    const sa = await call("POST", "/api/admin/service-accounts", { name: "ai-core" }, asAdmin());
    const aiCore = await call("POST", "/auth/token", {
      grant_type: "client_credentials",
      client_id: "ai-core",
      client_secret: issued(sa.body.client_secret),
    });
    const token = issued(aiCore.body.access_token);
    const port = await startMarkedPlugin();
    const endpoints = {
      answer: "/answer",
      fail_500: "/fail/500",
      fail_502: "/fail/502",
      fail_503: "/fail/503",
      held_back: "/answer",
    };
    const registered = await call(
      "POST",
      "/admin/plugins",
      { id: "oracle", plugin_type: "internal", endpoints, port },
      asAdmin(),
    );
    expect(registered.status).toBe(200);
    const credentials = registered.body.credentials as { credential: string; core_secret: string };
    issued(credentials.credential);
    issued(credentials.core_secret);
    await call(
      "PUT",
      "/admin/operator/allowlist",
      {
        caller: "ai-core",
        target: "oracle",
        operations: ["answer", "fail_500", "fail_502", "fail_503"],
      },
      asAdmin(),
    );
    const gateway = (operation: string, payload: unknown, auth: { token?: string } = { token }) =>
      call("POST", `/gateway/oracle/${operation}`, { caller_plugin: "ai-core", payload }, auth);
    const answered = await gateway("answer", { note: planted("payload") });
    expect(answered.body).toEqual({ answer: mark("plugin-reply") });
    for (const status of [500, 502, 503]) {
      const failed = await gateway(`fail_${status}`, { note: planted(`payload-${status}`) });
      // 502 reaches the caller as 500 (docs/operator-lane.md).
      expect([failed.status, failed.reason]).toEqual([
        status === 502 ? 500 : status,
        "PLUGIN_ERROR",
      ]);
    }
    const outcomes = [
      await gateway("held_back", { note: planted("payload-not-allowlisted") }),
      await gateway("answer", { classification: "phi", note: planted("payload-phi") }),
      await gateway("answer", { note: planted("payload-anonymous") }, {}),
      await gateway("answer", {
        note: `${planted("payload-oversized")}${"x".repeat(maxBodyBytes)}`,
      }),
    ].map((r) => [r.status, r.reason]);
    expect(outcomes).toEqual([
      [403, "NOT_ALLOWLISTED"],
      [403, "POLICY_DENIED"],
      [401, "MISSING"],
      [413, "BODY_TOO_LARGE"],
    ]);
    // Over gRPC too (its access line is checked by request id like the others).
    const client = createClient(GatewayService, createGrpcTransport({ baseUrl: server.url }));
    const id = "sec-grpc";
    const reply = await client.call(
      {
        pluginId: "oracle",
        operation: "answer",
        callerPlugin: "ai-core",
        payload: { note: planted("payload-grpc") },
      },
      { headers: { authorization: `Bearer ${token}`, "x-request-id": id } },
    );
    expect(reply.reply).toEqual({ answer: mark("plugin-reply") });
    made.set(id, { status: 200, code: "ok", reason: undefined });
    const failed = await client
      .call(
        { pluginId: "oracle", operation: "fail_503", callerPlugin: "ai-core", payload: {} },
        { headers: { authorization: `Bearer ${token}`, "x-request-id": "sec-grpc-503" } },
      )
      .catch((e: unknown) => ConnectError.from(e));
    expect(failed).toBeInstanceOf(ConnectError);
    made.set("sec-grpc-503", { status: 200, code: "unavailable", reason: "PLUGIN_ERROR" });
  });

  it("search and ingestion: document content and query text", async () => {
    const ingested = await call(
      "POST",
      "/api/rag/ingest",
      {
        documents: [
          {
            path: "notes/visit.md",
            title: planted("document-title"),
            content: `Visit note: ${planted("document-content")} lactate measured.`,
            required_traits: [],
            classification: "internal",
          },
        ],
      },
      { token: admin.token },
    );
    expect(ingested.status).toBe(200);
    const found = await call(
      "POST",
      "/api/search",
      { q: `lactate ${planted("query")}`, top_k: 3 },
      { token: admin.token },
    );
    expect(found.status).toBe(200);
  });

  it("has none of it in the log", async () => {
    // The lines of the last calls are written once their answers are out.
    await until(
      () =>
        [...made.keys()].every((id) =>
          server.logs.some((l) => l.includes(`"request_id":"${id}"`) && l.includes('"msg":"call"')),
        ),
      5000,
    ).catch(() => undefined);
    const log = server.logs.join("\n");
    expect(log).toContain("API key refused"); // the whole run was logged at debug
    const leaked = [...secrets].filter((s) => log.includes(s));
    expect(leaked).toEqual([]);
    // API keys are checked without their public prefix too (tgk_<prefix>_<secret>).
    for (const s of secrets) if (s.startsWith("tgk_")) expect(log).not.toContain(s.slice(13));
  });

  it("has one access line per call, with the outcome its client saw", () => {
    const lines = server.logs
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === "call");
    expect(made.size).toBeGreaterThan(25);
    for (const [id, want] of made) {
      const own = lines.filter((l) => l.request_id === id);
      expect(own, id).toHaveLength(1);
      expect(own[0], id).toMatchObject({
        code: want.code,
        ...(id.startsWith("sec-grpc") ? { protocol: "grpc" } : { http_status: want.status }),
      });
      if (want.reason !== undefined) expect(own[0]?.reason, id).toBe(want.reason);
      expect(typeof own[0]?.rpc === "string" || typeof own[0]?.route === "string", id).toBe(true);
    }
  });
});
