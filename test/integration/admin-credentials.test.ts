import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  type DescMethod,
  type DescMethodServerStreaming,
  type DescMethodUnary,
  type DescService,
  fromJson,
  type JsonValue,
} from "@bufbuild/protobuf";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { ApiKeyService } from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import { AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import {
  GatewayService,
  OperatorAllowlistService,
  PluginRegistryService,
} from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { ServiceAccountAdminService } from "../../gen/traitgate/identity/v1/service_accounts_pb.js";
import { UserAdminService } from "../../gen/traitgate/identity/v1/user_admin_pb.js";
import { PolicyService } from "../../gen/traitgate/policy/v1/policy_pb.js";
import { SearchService } from "../../gen/traitgate/search/v1/search_pb.js";
import { SettingsService } from "../../gen/traitgate/settings/v1/settings_pb.js";
import { allScopes } from "../../src/apikeys/scopes.js";
import { httpStatusOf } from "../../src/server/http-status.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Every administrative API takes two credentials (decisions.md §7): a bearer token with the
 * role and an X-API-Key with the scope. The table (test/cases/admin/methods.json) names every
 * administrative method of the core and its scope; each is called over REST and gRPC against
 * a real core: without a key (401 API_KEY_MISSING), with a key holding every scope but that
 * one (403 API_KEY_SCOPE), by a user without the role with a key holding every scope (403
 * ROLE), and with a key holding that scope alone (the handler's answer). The table must
 * classify every method the server serves, so that a new method cannot slip through.
 */

interface AdminCase {
  rpc: string;
  scope: string;
  rest: { method: string; path: string; body?: JsonValue } | null;
  grpc: JsonValue;
  want: number;
}
interface Table {
  methods: AdminCase[];
  notAdministrative: Record<string, string>;
}

const table = JSON.parse(
  readFileSync(join(import.meta.dirname, "../cases/admin/methods.json"), "utf8"),
) as Table;

/** Every service of the core, to find a method by its rpc name. */
const services: DescService[] = [
  IdentityService,
  UserAdminService,
  ServiceAccountAdminService,
  ApiKeyService,
  AuditService,
  SettingsService,
  PolicyService,
  PluginRegistryService,
  OperatorAllowlistService,
  GatewayService,
  SearchService,
  Health,
  ServerReflection,
  ServerReflectionV1alpha,
];

function methodOf(rpc: string): DescMethod {
  const [serviceName, methodName] = rpc.split("/");
  const method = services
    .find((s) => s.typeName === serviceName)
    ?.methods.find((m) => m.name === methodName);
  if (method === undefined) throw new Error(`no method ${rpc}`);
  return method;
}

const isUnary = (m: DescMethod): m is DescMethod & DescMethodUnary => m.methodKind === "unary";
const isServerStreaming = (m: DescMethod): m is DescMethod & DescMethodServerStreaming =>
  m.methodKind === "server_streaming";

/** The JSON with `$p` replaced by the protocol's name in every string. */
function forProtocol<T extends JsonValue | undefined>(value: T, protocol: string): T {
  return JSON.parse(JSON.stringify(value ?? null).replaceAll("$p", protocol)) as T;
}

const authReasons = ["API_KEY_MISSING", "API_KEY_INVALID", "API_KEY_SCOPE", "ROLE"];
const password = "admin credentials lantern 5521";

interface Reply {
  status: number;
  reason: string | undefined;
}
type Credentials = { token: string; key?: string };

let server: TestServer;
let h2: Http2SessionManager;
let transport: Transport;
let adminToken = "";
let viewerToken = "";
const keys = new Map<string, Promise<string>>();

/** A key with exactly these scopes, made once (as the command line makes keys). */
function keyWith(scopes: readonly string[]): Promise<string> {
  const name = [...scopes].sort().join(" ");
  let key = keys.get(name);
  if (key === undefined) {
    key = server.createApiKey([...scopes], { name: `holds ${scopes.length} scopes` });
    keys.set(name, key);
  }
  return key;
}

const headersOf = (c: Credentials): Record<string, string> => ({
  authorization: `Bearer ${c.token}`,
  ...(c.key === undefined ? {} : { "x-api-key": c.key }),
});

async function overRest(c: AdminCase, credentials: Credentials): Promise<Reply> {
  if (c.rest === null) throw new Error(`${c.rpc} has no REST binding`);
  const rest = forProtocol(c.rest, "rest");
  const res = await callJson(server.url, rest.path, rest.body, {
    method: rest.method,
    headers: headersOf(credentials),
  });
  return { status: res.status, reason: res.reason };
}

async function overGrpc(c: AdminCase, credentials: Credentials): Promise<Reply> {
  const method = methodOf(c.rpc);
  const input = fromJson(method.input, forProtocol(c.grpc, "grpc"));
  const headers = headersOf(credentials);
  try {
    if (isUnary(method)) {
      await transport.unary(method, undefined, undefined, headers, input);
    } else if (isServerStreaming(method)) {
      // Answered when the first message arrives (the table's watch replays an event).
      const abort = new AbortController();
      const res = await transport.stream(
        method,
        abort.signal,
        undefined,
        headers,
        (async function* () {
          yield input;
        })(),
      );
      for await (const _ of res.message) break;
      abort.abort();
    } else {
      throw new Error(`${c.rpc}: no client for ${method.methodKind}`);
    }
    return { status: 200, reason: undefined };
  } catch (err) {
    const e = ConnectError.from(err);
    return { status: httpStatusOf(e.code), reason: e.findDetails(ErrorInfoSchema)[0]?.reason };
  }
}

async function login(username: string): Promise<string> {
  const res = await callJson(server.url, "/auth/login", { username, password });
  if (res.status !== 200) throw new Error(`login of ${username}: ${res.status}`);
  return res.body.token as string;
}

beforeAll(async () => {
  server = await startTestServer();
  h2 = new Http2SessionManager(server.url);
  transport = createGrpcTransport({ baseUrl: server.url, sessionManager: h2 });
  await server.createUser("root", password, ["admin"]);
  await server.createUser("vic", password, ["viewer"]);
  adminToken = await login("root");
  viewerToken = await login("vic");
  // One operator_call event for WatchOperatorCalls to replay: a refused gateway call.
  await callJson(server.url, "/gateway/never-registered/ping", {
    caller_plugin: "ai-core",
    payload: {},
  });
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { rows } = await server.core.db.query(
      "SELECT 1 FROM audit_events WHERE action = 'operator_call' LIMIT 1",
    );
    if (rows.length > 0) break;
    if (Date.now() > deadline) throw new Error("no operator_call event was written");
    await new Promise((r) => setTimeout(r, 20));
  }
});

afterAll(async () => {
  h2?.abort();
  await server?.close();
});

describe("the table of administrative methods", () => {
  it("classifies every method the server serves, once", async () => {
    const reflection = createClient(ServerReflection, transport);
    const served: string[] = [];
    for await (const res of reflection.serverReflectionInfo(
      (async function* () {
        yield { messageRequest: { case: "listServices" as const, value: "" } };
      })(),
    )) {
      if (res.messageResponse.case === "listServicesResponse") {
        served.push(...res.messageResponse.value.service.map((s) => s.name));
      }
      break;
    }
    expect(served.length).toBeGreaterThan(5);
    const admin = table.methods.map((c) => c.rpc);
    expect(new Set(admin).size).toBe(admin.length);
    for (const name of served) {
      const service = services.find((s) => s.typeName === name);
      expect(service, `the server serves ${name}: add it to this test and the table`).toBeDefined();
      for (const m of service?.methods ?? []) {
        const rpc = `${name}/${m.name}`;
        const other = table.notAdministrative[rpc] ?? table.notAdministrative[`${name}/*`];
        expect(
          admin.includes(rpc) !== (other !== undefined),
          `${rpc}: in "methods" (with its scope) or in "notAdministrative", not both`,
        ).toBe(true);
      }
    }
  });

  it("names only scopes a key can hold", () => {
    for (const c of table.methods) expect(allScopes, c.rpc).toContain(c.scope);
  });
});

const protocols = [
  { name: "REST", call: overRest, cases: table.methods.filter((c) => c.rest !== null) },
  { name: "gRPC", call: overGrpc, cases: table.methods },
] as const;

describe.each(protocols)("over $name", ({ call, cases }) => {
  it.each(cases.map((c) => [c.rpc, c] as const))(
    "%s needs the admin token and a key with its scope",
    async (_rpc, c) => {
      const noKey = await call(c, { token: adminToken });
      expect(noKey, "admin token without a key").toEqual({
        status: 401,
        reason: "API_KEY_MISSING",
      });

      const others = allScopes.filter((s) => s !== c.scope);
      const wrongScope = await call(c, { token: adminToken, key: await keyWith(others) });
      expect(wrongScope, `key with every scope but ${c.scope}`).toEqual({
        status: 403,
        reason: "API_KEY_SCOPE",
      });

      const noRole = await call(c, { token: viewerToken, key: await keyWith(allScopes) });
      expect(noRole, "a viewer with a key holding every scope").toEqual({
        status: 403,
        reason: "ROLE",
      });

      const right = await call(c, { token: adminToken, key: await keyWith([c.scope]) });
      expect(authReasons, `refused with ${c.scope}`).not.toContain(right.reason);
      expect(right.status, `${c.scope} alone: ${right.reason ?? ""}`).toBe(c.want);
    },
  );
});
