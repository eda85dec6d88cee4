import { createServer } from "node:http";
import { connect as http2Connect } from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CallRequestSchema, GatewayService } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { verifyAuditChain } from "../../src/audit/index.js";
import { type EchoPlugin, startEchoPlugin } from "../support/echo-plugin.js";
import { callJson } from "../support/http.js";
import { serviceAccountToken } from "../support/operator-lane.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The operator lane end to end, against examples/echo-plugin running as its own
 * process: the spec's setup sequence (register, allowlist ai-core → echo, call),
 * refusals, plugin failures, the policy, and one operator_call event per call
 * that never holds the payload.
 */

const password = "operator-lane-admin-pw";
/** Put in payloads; must never appear in a log line or an audit record. */
const marker = "PAYLOAD-MARKER-7f3a";
let server: TestServer;
let admin: { token: string; key: string };
let aiCore = "";
let echo: EchoPlugin;
let echoCredential = "";

const adminCall = (path: string, body: unknown, method = "POST") =>
  callJson(server.url, path, body, {
    token: admin.token,
    method,
    headers: { "x-api-key": admin.key },
  });

/** Gateway calls made by this file, to compare with the operator_call events. */
let callsMade = 0;

/**
 * The `grpc-status` of one gRPC call made over a plain HTTP/2 stream, which (unlike a gRPC
 * client given a deadline) never cancels the call itself.
 */
function grpcStatusOf(
  path: string,
  message: Uint8Array,
  headers: Record<string, string>,
): Promise<string | undefined> {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  const session = http2Connect(server.url);
  return new Promise<string | undefined>((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    let status: string | undefined;
    const take = (h: Record<string, unknown>) => {
      if (typeof h["grpc-status"] === "string") status = h["grpc-status"];
    };
    stream.on("response", take);
    stream.on("trailers", take);
    stream.on("error", reject);
    stream.resume();
    stream.on("close", () => resolve(status));
    stream.end(frame);
  }).finally(() => session.close());
}

const gatewayCall = (
  token: string,
  plugin: string,
  operation: string,
  payload: unknown,
  caller = "ai-core",
  headers: Record<string, string> = {},
) => {
  callsMade++;
  return callJson(
    server.url,
    `/gateway/${plugin}/${operation}`,
    { caller_plugin: caller, payload },
    { token, headers },
  );
};

async function operatorCalls(): Promise<{ outcome: string; details: Record<string, unknown> }[]> {
  const { rows } = await server.core.db.query<{
    outcome: string;
    details: Record<string, unknown>;
  }>("SELECT outcome, details FROM audit_events WHERE action = 'operator_call' ORDER BY seq");
  return rows;
}

/** The operator_call events once `count` are committed (a call's is, before its answer; refusals before the method ran are written once answered). */
async function eventsAfter(count: number) {
  for (let i = 0; i < 100; i++) {
    const rows = await operatorCalls();
    if (rows.length >= count) return rows;
    await new Promise((r) => setTimeout(r, 20));
  }
  return operatorCalls();
}

beforeAll(async () => {
  server = await startTestServer({ env: { GATEWAY_TIMEOUT_MS: "500" } });
  await server.createUser("root", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "root", password });
  admin = {
    token: login.body.token as string,
    key: await server.createApiKey([
      "plugins:read",
      "plugins:write",
      "operator:read",
      "operator:write",
      "service_accounts:write",
    ]),
  };
  aiCore = await serviceAccountToken(server.url, adminCall, "ai-core");

  // The spec's setup sequence: declare the endpoints in a manifest, register, start the
  // plugin with the core's secret, point the manifest at its port, allowlist.
  const registered = await adminCall("/admin/plugins", {
    id: "echo",
    name: "Echo",
    plugin_type: "internal",
    endpoints: {
      echo: "/echo",
      slow: "/slow",
      fail: "/fail",
      rag_index: "/rag/index",
      rag_query: "/rag/query",
    },
  });
  expect(registered.status).toBe(200);
  const credentials = registered.body.credentials as { credential: string; core_secret: string };
  echoCredential = credentials.credential;
  echo = await startEchoPlugin(credentials.core_secret);
  const updated = await adminCall(
    "/admin/plugins/echo",
    {
      name: "Echo",
      plugin_type: "internal",
      endpoints: (registered.body.plugin as { manifest: { endpoints: object } }).manifest.endpoints,
      port: echo.port,
    },
    "PUT",
  );
  expect(updated.status).toBe(200);
  const allow = await adminCall(
    "/admin/operator/allowlist",
    { caller: "ai-core", target: "echo", operations: ["rag_index", "rag_query", "slow", "fail"] },
    "PUT",
  );
  expect(allow.status).toBe(200);
  expect(allow.body).toMatchObject({ caller: "ai-core", target: "echo" });
});

afterAll(async () => {
  await echo?.stop();
  await server?.close();
});

describe("the setup sequence", () => {
  it("forwards allowlisted operations to the plugin and answers with its reply", async () => {
    const before = (await operatorCalls()).length;
    const indexed = await gatewayCall(aiCore, "echo", "rag_index", {
      doc_id: "d1",
      classification: "internal",
      chunks: [{ chunk_no: 0, content: marker }],
    });
    expect(indexed.status).toBe(200);
    expect(indexed.body).toEqual({ ok: true, doc_id: "d1", chunks: 1 });
    const queried = await gatewayCall(aiCore, "echo", "rag_query", { q: marker, top_k: 2 });
    expect(queried.status).toBe(200);
    expect((queried.body.items as unknown[]).length).toBe(2);
    const notAllowed = await gatewayCall(aiCore, "echo", "echo", { q: marker });
    expect([notAllowed.status, notAllowed.reason]).toEqual([403, "NOT_ALLOWLISTED"]);
    const events = (await eventsAfter(before + 3)).slice(before);
    expect(events.map((e) => [e.outcome, e.details.operation, e.details.status])).toEqual([
      ["success", "rag_index", 200],
      ["success", "rag_query", 200],
      ["denied", "echo", 403],
    ]);
    expect(events[0]?.details).toMatchObject({ caller: "ai-core", reason: "" });
    expect(Number(events[0]?.details.payload_bytes)).toBeGreaterThan(0);
  });

  it("answers gRPC callers the same way", async () => {
    const client = createClient(GatewayService, createGrpcTransport({ baseUrl: server.url }));
    callsMade++;
    const res = await client.call(
      {
        pluginId: "echo",
        operation: "rag_index",
        callerPlugin: "ai-core",
        payload: { doc_id: "g1" },
      },
      { headers: { authorization: `Bearer ${aiCore}` } },
    );
    expect(res.reply).toEqual({ ok: true, doc_id: "g1", chunks: 1 });
  });

  it("sends the plugin the request id and the caller, never the caller's credential", async () => {
    await adminCall(
      "/admin/operator/allowlist",
      {
        caller: "ai-core",
        target: "echo",
        operations: ["echo", "rag_index", "rag_query", "slow", "fail"],
      },
      "PUT",
    );
    const res = await gatewayCall(aiCore, "echo", "echo", { hello: "x" }, "ai-core", {
      "x-request-id": "req-echo-1",
    });
    expect(res.status).toBe(200);
    const seen = res.body.seen as { request_id: string; caller: string; header_names: string[] };
    expect(seen).toMatchObject({ request_id: "req-echo-1", caller: "ai-core" });
    expect(JSON.stringify(res.body)).not.toContain(aiCore);
  });
});

describe("bytes on the hop", () => {
  it("sends the plugin the caller's payload bytes, and the REST caller the plugin's reply bytes, as they are", async () => {
    // A plugin that keeps what it received and answers with JSON written its own way.
    const received: string[] = [];
    const reply = '{ "n" : 1.0, "s" : "\\u00e9\u00e9", "nested" : { "a" : [ 1e2 ] } }';
    const raw = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        received.push(Buffer.concat(chunks).toString());
        res.writeHead(200, { "content-type": "application/json" }).end(reply);
      });
    });
    await new Promise<void>((r) => raw.listen(0, "127.0.0.1", r));
    try {
      const port = (raw.address() as AddressInfo).port;
      const registered = await adminCall("/admin/plugins", {
        id: "raw",
        plugin_type: "internal",
        endpoints: { take: "/take" },
      });
      expect(registered.status).toBe(200);
      await adminCall(
        "/admin/plugins/raw",
        { plugin_type: "internal", endpoints: { take: "/take" }, port },
        "PUT",
      );
      await adminCall(
        "/admin/operator/allowlist",
        { caller: "ai-core", target: "raw", operations: ["take"] },
        "PUT",
      );
      const payload =
        '{ "q" : "x\\u0041",\n "n": 1.50, "list": [ {"classification":"internal"} ] }';
      callsMade++;
      const res = await fetch(`${server.url}/gateway/raw/take`, {
        method: "POST",
        headers: { authorization: `Bearer ${aiCore}`, "content-type": "application/json" },
        body: `{"caller_plugin":"ai-core", "payload" : ${payload} }`,
      });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe(reply);
      expect(received).toEqual([payload]);
      // gRPC callers get the same reply as a Struct.
      const client = createClient(GatewayService, createGrpcTransport({ baseUrl: server.url }));
      callsMade++;
      const viaGrpc = await client.call(
        { pluginId: "raw", operation: "take", callerPlugin: "ai-core", payload: { q: "y" } },
        { headers: { authorization: `Bearer ${aiCore}` } },
      );
      expect(viaGrpc.reply).toEqual(JSON.parse(reply));
      expect(received[1]).toBe('{"q":"y"}');
      // A key given twice: the policy decided on the last value (as JSON.parse keeps it), so
      // the plugin gets that value written anew, never text it might read otherwise.
      callsMade++;
      const twice = await fetch(`${server.url}/gateway/raw/take`, {
        method: "POST",
        headers: { authorization: `Bearer ${aiCore}`, "content-type": "application/json" },
        body: '{"caller_plugin":"ai-core","payload":{"classification":"phi","classification":"internal"}}',
      });
      expect(twice.status).toBe(200);
      expect(received[2]).toBe('{"classification":"internal"}');
    } finally {
      raw.close();
    }
  });
});

describe("who may call", () => {
  it("refuses a body that names another caller (403) and a call without credentials (401)", async () => {
    const other = await adminCall("/admin/plugins", {
      id: "other",
      plugin_type: "internal",
      endpoints: { ping: "/ping" },
    });
    const otherCredential = (other.body.credentials as { credential: string }).credential;
    const impersonating = await gatewayCall(otherCredential, "echo", "rag_query", {}, "ai-core");
    expect([impersonating.status, impersonating.reason]).toEqual([403, "CALLER_MISMATCH"]);
    callsMade++;
    const anonymous = await callJson(server.url, "/gateway/echo/rag_query", {
      caller_plugin: "ai-core",
      payload: {},
    });
    expect(anonymous.status).toBe(401);
    const badCredential = await gatewayCall(
      `tgp_${"x".repeat(43)}`,
      "echo",
      "rag_query",
      {},
      "other",
    );
    expect([badCredential.status, badCredential.reason]).toEqual([
      401,
      "PLUGIN_CREDENTIAL_INVALID",
    ]);
  });

  it("lets a plugin call as itself when allowlisted, and refuses users", async () => {
    await adminCall(
      "/admin/operator/allowlist",
      { caller: "echo", target: "echo", operations: ["rag_query"] },
      "PUT",
    );
    const self = await gatewayCall(echoCredential, "echo", "rag_query", { top_k: 1 }, "echo");
    expect(self.status).toBe(200);
    const user = await gatewayCall(admin.token, "echo", "rag_query", {}, "root");
    expect([user.status, user.reason]).toEqual([403, "CALLER_NOT_A_PLUGIN"]);
  });

  it("refuses the next call at once when the allowlist entry is removed", async () => {
    await adminCall(
      "/admin/operator/allowlist",
      { caller: "ai-core", target: "other", operations: ["ping"] },
      "PUT",
    );
    const removed = await callJson(
      server.url,
      "/admin/operator/allowlist?caller=ai-core&target=other",
      undefined,
      { token: admin.token, method: "DELETE", headers: { "x-api-key": admin.key } },
    );
    expect(removed.status).toBe(200);
    const res = await gatewayCall(aiCore, "other", "ping", {});
    expect([res.status, res.reason]).toEqual([403, "NOT_ALLOWLISTED"]);
  });

  it("answers 404 for an unknown plugin, an unknown operation and a disabled plugin", async () => {
    expect((await gatewayCall(aiCore, "nope", "rag_query", {})).reason).toBe("PLUGIN_NOT_FOUND");
    expect((await gatewayCall(aiCore, "echo", "nope", {})).reason).toBe("OPERATION_NOT_FOUND");
    expect((await adminCall("/admin/plugins/other:disable", {})).status).toBe(200);
    const disabled = await gatewayCall(aiCore, "other", "ping", {});
    expect([disabled.status, disabled.reason]).toEqual([404, "PLUGIN_NOT_FOUND"]);
  });
});

describe("when the plugin fails", () => {
  it("maps a plugin error status through with its body, a timeout to 504, a dead plugin to 503", async () => {
    const failed = await gatewayCall(aiCore, "echo", "fail", { status: 500, message: "boom" });
    expect([failed.status, failed.reason]).toEqual([500, "PLUGIN_ERROR"]);
    const details = failed.body.details as Record<string, unknown>[];
    expect(details[1]).toMatchObject({ value: { error: "boom" } });
    const teapot = await gatewayCall(aiCore, "echo", "fail", { status: 409, message: "taken" });
    expect(teapot.status).toBe(409);
    const slow = await gatewayCall(aiCore, "echo", "slow", { ms: 2000 });
    expect([slow.status, slow.reason]).toEqual([504, "PLUGIN_TIMEOUT"]);
    // The caller's own, shorter deadline wins too (a gRPC deadline): a 100 ms `grpc-timeout`
    // on a call whose plugin answers after 400 ms (within the gateway's own 500 ms). The
    // request never cancels itself, so only the server can end the call early; had it
    // waited for the plugin, the call would succeed (status 0).
    callsMade++;
    const status = await grpcStatusOf(
      "/traitgate.gateway.v1.GatewayService/Call",
      toBinary(
        CallRequestSchema,
        create(CallRequestSchema, {
          pluginId: "echo",
          operation: "slow",
          callerPlugin: "ai-core",
          payload: { ms: 400 },
        }),
      ),
      { authorization: `Bearer ${aiCore}`, "grpc-timeout": "100m" },
    );
    expect(status).toBe(String(Code.DeadlineExceeded));

    const ghost = await adminCall("/admin/plugins", {
      id: "ghost",
      plugin_type: "internal",
      endpoints: { rag_query: "/rag/query" },
      port: await closedPort(),
    });
    expect(ghost.status).toBe(200);
    await adminCall(
      "/admin/operator/allowlist",
      { caller: "ai-core", target: "ghost", operations: ["rag_query"] },
      "PUT",
    );
    const down = await gatewayCall(aiCore, "ghost", "rag_query", {});
    expect([down.status, down.reason]).toEqual([503, "PLUGIN_UNAVAILABLE"]);
  });
});

describe("policy", () => {
  it("never sends health data to an external plugin, and sends personal data sanitized", async () => {
    const ext = await adminCall("/admin/plugins", {
      id: "outside",
      plugin_type: "external",
      endpoints: { echo: "/echo" },
    });
    expect(ext.status).toBe(200);
    const outside = await startEchoPlugin(
      (ext.body.credentials as { core_secret: string }).core_secret,
    );
    try {
      await adminCall(
        "/admin/plugins/outside",
        { plugin_type: "external", endpoints: { echo: "/echo" }, port: outside.port },
        "PUT",
      );
      await adminCall(
        "/admin/operator/allowlist",
        { caller: "ai-core", target: "outside", operations: ["echo"] },
        "PUT",
      );
      const phi = await gatewayCall(aiCore, "outside", "echo", {
        classification: "phi",
        diagnosis: marker,
      });
      expect([phi.status, phi.reason]).toEqual([403, "POLICY_DENIED"]);
      const unclassified = await gatewayCall(aiCore, "outside", "echo", { note: "x" });
      expect([unclassified.status, unclassified.reason]).toEqual([403, "POLICY_DENIED"]);
      const pii = await gatewayCall(aiCore, "outside", "echo", {
        classification: "pii",
        email: "pat@example.test",
        note: "call 555-123-4567 about the invoice",
        topic: "billing",
      });
      expect(pii.status).toBe(200);
      const sent = pii.body.echo as Record<string, unknown>;
      expect(sent.email).toBeUndefined();
      expect(sent.topic).toBe("billing");
      expect(String(sent.note)).not.toContain("555-123-4567");
      const publicData = await gatewayCall(aiCore, "outside", "echo", {
        classification: "public",
        note: "hello",
      });
      expect((publicData.body.echo as Record<string, unknown>).note).toBe("hello");
    } finally {
      await outside.stop();
    }
  });
});

describe("manifests and the allowlist are checked", () => {
  it.each([
    ["a .. segment", { rag_query: "/rag/../admin" }],
    ["an absolute URL", { rag_query: "http://169.254.169.254/latest" }],
    ["a scheme-relative URL", { rag_query: "//evil.example/x" }],
    ["a percent-encoded dot", { rag_query: "/rag/%2e%2e/x" }],
  ])("refuses a manifest path with %s (400)", async (_, endpoints) => {
    const res = await adminCall("/admin/plugins", {
      id: "bad-manifest",
      plugin_type: "internal",
      endpoints,
    });
    expect([res.status, res.reason]).toEqual([400, "INVALID_MANIFEST"]);
    expect(JSON.stringify(res.body)).toContain("manifest.endpoints.rag_query");
  });

  it("refuses a host outside PLUGIN_ALLOWED_HOSTS unless allowed explicitly, and an unregistered plugin type", async () => {
    const manifest = {
      id: "remote",
      plugin_type: "internal",
      endpoints: { rag_query: "/q" },
      // A public address (TEST-NET-3): an unlisted name would have to resolve.
      host: "203.0.113.10",
    };
    const refused = await adminCall("/admin/plugins", manifest);
    expect([refused.status, refused.reason]).toEqual([400, "INVALID_MANIFEST"]);
    const allowed = await adminCall("/admin/plugins?allow_unlisted_host=true", manifest);
    expect(allowed.status).toBe(200);
    expect((allowed.body.plugin as { unlisted_host: boolean }).unlisted_host).toBe(true);
    const metadata = await adminCall("/admin/plugins?allow_unlisted_host=true", {
      ...manifest,
      id: "imds",
      host: "169.254.169.254",
    });
    expect([metadata.status, metadata.reason]).toEqual([400, "HOST_REFUSED"]);
    // A new host gets new secrets: the old core secret never goes to another host.
    const moved = await adminCall(
      "/admin/plugins/remote",
      { plugin_type: "internal", endpoints: { rag_query: "/q" }, host: "localhost" },
      "PUT",
    );
    expect(moved.status).toBe(200);
    const oldSecret = (allowed.body.credentials as { core_secret: string }).core_secret;
    const newSecret = (moved.body.credentials as { core_secret: string }).core_secret;
    expect(newSecret).toMatch(/^tgc_/);
    expect(newSecret).not.toBe(oldSecret);
    const samePlace = await adminCall(
      "/admin/plugins/remote",
      { plugin_type: "internal", endpoints: { rag_query: "/q" }, host: "localhost", port: 9000 },
      "PUT",
    );
    expect(samePlace.body.credentials).toBeUndefined();
    const badType = await adminCall("/admin/plugins", {
      ...manifest,
      id: "typo",
      host: "",
      plugin_type: "extrenal",
    });
    expect(badType.status).toBe(400);
    expect(JSON.stringify(badType.body)).toContain("plugin_type");
  });

  it("refuses allowlist operations the target's manifest lacks, and plugin ids taken by service accounts", async () => {
    const res = await adminCall(
      "/admin/operator/allowlist",
      { caller: "ai-core", target: "echo", operations: ["rag_query", "drop_tables"] },
      "PUT",
    );
    expect([res.status, res.reason]).toEqual([400, "UNKNOWN_OPERATION"]);
    const clash = await adminCall("/admin/plugins", {
      id: "ai-core",
      plugin_type: "internal",
      endpoints: { x: "/x" },
    });
    expect([clash.status, clash.reason]).toEqual([409, "CALLER_NAME_TAKEN"]);
  });

  it("refuses an unknown caller, and forgets a deleted caller's entries", async () => {
    const unknown = await adminCall(
      "/admin/operator/allowlist",
      { caller: "nobody", target: "echo", operations: ["rag_query"] },
      "PUT",
    );
    expect([unknown.status, unknown.reason]).toEqual([404, "CALLER_NOT_FOUND"]);
    const temp = await adminCall("/admin/plugins", {
      id: "temp",
      plugin_type: "internal",
      endpoints: { x: "/x" },
    });
    expect(temp.status).toBe(200);
    await adminCall(
      "/admin/operator/allowlist",
      { caller: "temp", target: "echo", operations: ["rag_query"] },
      "PUT",
    );
    expect((await adminCall("/admin/plugins/temp", undefined, "DELETE")).status).toBe(200);
    const sa = await adminCall("/api/admin/service-accounts", { name: "sa-temp" });
    const saId = (sa.body.service_account as { service_account_id: string }).service_account_id;
    await adminCall(
      "/admin/operator/allowlist",
      { caller: "sa-temp", target: "echo", operations: ["rag_query"] },
      "PUT",
    );
    await adminCall(`/api/admin/service-accounts/${saId}`, undefined, "DELETE");
    const list = await callJson(server.url, "/admin/operator/allowlist?target=echo", undefined, {
      token: admin.token,
      method: "GET",
      headers: { "x-api-key": await server.createApiKey(["operator:read"]) },
    });
    const callers = (list.body.entries as { caller: string }[]).map((e) => e.caller);
    expect(callers).not.toContain("temp");
    expect(callers).not.toContain("sa-temp");
  });

  it("needs the admin role and an API key with the operator scope", async () => {
    const readOnly = await server.createApiKey(["operator:read"]);
    const res = await callJson(
      server.url,
      "/admin/operator/allowlist",
      { caller: "ai-core", target: "echo", operations: ["rag_query"] },
      { token: admin.token, method: "PUT", headers: { "x-api-key": readOnly } },
    );
    expect([res.status, res.reason]).toEqual([403, "API_KEY_SCOPE"]);
  });
});

describe("the audit trail", () => {
  it("streams operator calls to a watcher as they are written", async () => {
    const client = createClient(GatewayService, createGrpcTransport({ baseUrl: server.url }));
    const auditKey = await server.createApiKey(["audit:read"]);
    const abort = new AbortController();
    const seen: string[] = [];
    const watching = (async () => {
      const stream = client.watchOperatorCalls(
        {},
        {
          headers: { authorization: `Bearer ${admin.token}`, "x-api-key": auditKey },
          signal: abort.signal,
        },
      );
      try {
        for await (const res of stream) {
          seen.push(`${res.call?.caller}->${res.call?.target}:${res.call?.operation}`);
          if (seen.length === 1) abort.abort();
        }
      } catch {
        // aborted
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    await gatewayCall(aiCore, "echo", "rag_query", { top_k: 1 }, "ai-core", {
      "x-request-id": "watched",
    });
    await watching;
    expect(seen).toEqual(["ai-core->echo:rag_query"]);
  });

  it("applies an allowlist or registry change only together with its audit event", async () => {
    const entry = async (target: string) => {
      const { rows } = await server.core.db.query<{ operations: string[] }>(
        "SELECT operations FROM operator_allowlist WHERE caller = 'ai-core' AND target = $1",
        [target],
      );
      return rows[0]?.operations;
    };
    const before = { echo: await entry("echo"), other: await entry("other") };
    expect(before.echo).toContain("rag_query");
    if (before.other === undefined) {
      await adminCall(
        "/admin/operator/allowlist",
        { caller: "ai-core", target: "other", operations: ["ping"] },
        "PUT",
      );
    }
    // The audit log refuses allowlist and registry events (others are written as usual).
    await server.core.db.exec(`
      CREATE FUNCTION test_refuse_allowlist_events() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.action LIKE 'allowlist_%' OR NEW.action LIKE 'plugin_%' THEN
          RAISE EXCEPTION 'refused by the test';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER test_refuse_allowlist_events BEFORE INSERT ON audit_events
        FOR EACH ROW EXECUTE FUNCTION test_refuse_allowlist_events();`);
    try {
      const put = await adminCall(
        "/admin/operator/allowlist",
        { caller: "ai-core", target: "echo", operations: ["rag_index"] },
        "PUT",
      );
      expect([put.status, put.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      const removed = await callJson(
        server.url,
        "/admin/operator/allowlist?caller=ai-core&target=other",
        undefined,
        { token: admin.token, method: "DELETE", headers: { "x-api-key": admin.key } },
      );
      expect([removed.status, removed.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      const disable = await adminCall("/admin/plugins/echo:disable", {});
      expect([disable.status, disable.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      const register = await adminCall("/admin/plugins", {
        id: "unaudited",
        plugin_type: "internal",
        endpoints: { x: "/x" },
      });
      expect([register.status, register.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      // Deleting a plugin also drops the entries naming it as caller: both roll back.
      const asCaller = await server.core.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM operator_allowlist WHERE caller = 'echo'",
      );
      expect(asCaller.rows[0]?.n).toBeGreaterThan(0);
      const deleted = await adminCall("/admin/plugins/echo", undefined, "DELETE");
      expect([deleted.status, deleted.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      const stillCaller = await server.core.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM operator_allowlist WHERE caller = 'echo'",
      );
      expect(stillCaller.rows[0]?.n).toBe(asCaller.rows[0]?.n);
      // No change was applied, and calls are still allowed as before.
      expect(await entry("echo")).toEqual(before.echo);
      expect(await entry("other")).toEqual(["ping"]);
      expect((await adminCall("/admin/plugins/unaudited", undefined, "GET")).status).toBe(404);
      expect((await gatewayCall(aiCore, "echo", "rag_query", { top_k: 1 })).status).toBe(200);
    } finally {
      await server.core.db.exec(`
        DROP TRIGGER test_refuse_allowlist_events ON audit_events;
        DROP FUNCTION test_refuse_allowlist_events();`);
    }
    const { rows } = await server.core.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM audit_events WHERE action LIKE 'allowlist_%' AND details::text LIKE '%\"after\":[\"rag_index\"]%'",
    );
    expect(rows[0]?.n).toBe(0);
  });

  it("has one operator_call event per call, without payload contents, and the chain verifies", async () => {
    const rows = await eventsAfter(callsMade);
    expect(rows.length).toBe(callsMade);
    const { rows: all } = await server.core.db.query<{ text: string }>(
      "SELECT row_to_json(a)::text AS text FROM audit_events a",
    );
    expect(all.some((r) => r.text.includes(marker))).toBe(false);
    expect(server.logs.join("\n")).not.toContain(marker);
    expect((await verifyAuditChain(server.core.db)).ok).toBe(true);
  });
});

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}
