import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import {
  type DescMessage,
  type DescMethod,
  type DescService,
  fromJson,
  type JsonObject,
  ScalarType,
} from "@bufbuild/protobuf";
import { createClient, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeyService } from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import { PluginRegistryService } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { ServiceAccountAdminService } from "../../gen/traitgate/identity/v1/service_accounts_pb.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Every answer that carries a token, a secret or recovery codes says `Cache-Control: no-store`
 * and `Pragma: no-cache` (RFC 6749 §5.1), on every protocol: REST, Connect, gRPC (the
 * server's unary fast path) and gRPC-Web, against a real server. Which methods those are is
 * read from the protos, so a new one cannot be forgotten here.
 */

const password = "no store lantern harbour 2231";

/** Response fields that hold a credential, by name (string fields only). */
const credentialFields = new Set([
  "token",
  "access_token",
  "refresh_token",
  "secret",
  "client_secret",
  "core_secret",
  "credential",
  "key",
  "recovery_codes",
  "otpauth_uri",
]);
/** Fields of those names that are not credentials: a setting's name. */
const notCredentials = new Set([
  "traitgate.settings.v1.SettingDefinition.key",
  "traitgate.settings.v1.SettingChange.key",
]);

function carriesCredential(message: DescMessage, seen = new Set<string>()): boolean {
  if (seen.has(message.typeName) || message.typeName.startsWith("google.")) return false;
  seen.add(message.typeName);
  return message.fields.some((field) =>
    field.message
      ? carriesCredential(field.message, seen)
      : field.scalar === ScalarType.STRING &&
        credentialFields.has(field.name) &&
        !notCredentials.has(`${message.typeName}.${field.name}`),
  );
}

/** Every service generated from proto/, found by walking gen/. */
async function allServices(): Promise<DescService[]> {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(join(dir, entry.name));
      else if (entry.name.endsWith("_pb.ts")) files.push(join(dir, entry.name));
    }
  };
  walk("gen/traitgate");
  const services: DescService[] = [];
  for (const file of files) {
    const mod = (await import(/* @vite-ignore */ pathToFileURL(resolve(file)).href)) as Record<
      string,
      { kind?: unknown }
    >;
    for (const value of Object.values(mod)) {
      if (value?.kind === "service") services.push(value as unknown as DescService);
    }
  }
  return services;
}

/** One call, prepared afresh for each protocol (refresh tokens are single-use, and so on). */
interface Prepared {
  rest: { method: "POST" | "PUT"; path: string; body: JsonObject };
  /** The whole request message in proto JSON, for the RPC protocols. */
  rpc: JsonObject;
  headers: Record<string, string>;
}
interface Case {
  service: DescService;
  method: string;
  prepare(n: number): Promise<Prepared>;
}

let server: TestServer;
let admin: Record<string, string>;
let serviceAccountId: string;
let clientSecret: string;
let counter = 0;

const unique = (prefix: string) => `${prefix}-${++counter}`;

async function loginAs(username: string): Promise<{ token: string; refresh_token: string }> {
  const res = await callJson(server.url, "/auth/login", { username, password });
  expect(res.status).toBe(200);
  return res.body as { token: string; refresh_token: string };
}

async function registerPlugin(id: string): Promise<void> {
  const res = await callJson(
    server.url,
    "/admin/plugins",
    { id, plugin_type: "internal", endpoints: { echo: "/echo" } },
    { headers: admin },
  );
  expect(res.status).toBe(200);
}

const post = (path: string, body: JsonObject): Prepared["rest"] => ({
  method: "POST",
  path,
  body,
});

const cases: Case[] = [
  {
    service: IdentityService,
    method: "Login",
    prepare: async () => {
      const body = { username: "user", password };
      return { rest: post("/auth/login", body), rpc: body, headers: {} };
    },
  },
  {
    service: IdentityService,
    method: "Refresh",
    prepare: async () => {
      const body = { refresh_token: (await loginAs("user")).refresh_token };
      return { rest: post("/auth/refresh", body), rpc: body, headers: {} };
    },
  },
  {
    service: IdentityService,
    method: "Token",
    prepare: async () => {
      const body = {
        grant_type: "client_credentials",
        client_id: "probe",
        client_secret: clientSecret,
      };
      return { rest: post("/auth/token", body), rpc: body, headers: {} };
    },
  },
  {
    service: IdentityService,
    method: "EnrollMfa",
    prepare: async () => {
      const { token } = await loginAs("user");
      return {
        rest: post("/auth/mfa/enroll", {}),
        rpc: {},
        headers: { authorization: `Bearer ${token}` },
      };
    },
  },
  {
    service: IdentityService,
    method: "ActivateMfa",
    prepare: async () => {
      // Each activation needs a user without MFA and a pending enrolment.
      const username = unique("mfa");
      await server.createUser(username, password);
      const { token } = await loginAs(username);
      const headers = { authorization: `Bearer ${token}` };
      const enrolled = await callJson(server.url, "/auth/mfa/enroll", {}, { headers });
      const body = { code: generateSync({ secret: enrolled.body.secret as string }) };
      return { rest: post("/auth/mfa/activate", body), rpc: body, headers };
    },
  },
  {
    service: ServiceAccountAdminService,
    method: "CreateServiceAccount",
    prepare: async () => {
      const body = { name: unique("sa"), roles: ["service"] };
      return { rest: post("/api/admin/service-accounts", body), rpc: body, headers: admin };
    },
  },
  {
    service: ServiceAccountAdminService,
    method: "RotateServiceAccountSecret",
    prepare: async () => ({
      rest: post(`/api/admin/service-accounts/${serviceAccountId}:rotate-secret`, {
        grace_seconds: 0,
      }),
      rpc: { service_account_id: serviceAccountId, grace_seconds: 0 },
      headers: admin,
    }),
  },
  {
    service: ApiKeyService,
    method: "CreateApiKey",
    prepare: async () => {
      const body = { name: unique("key"), scopes: ["api_keys:read"] };
      return { rest: post("/api/admin/api-keys", body), rpc: body, headers: admin };
    },
  },
  {
    service: PluginRegistryService,
    method: "RegisterPlugin",
    prepare: async () => {
      const manifest = { id: unique("reg"), plugin_type: "internal", endpoints: { echo: "/e" } };
      return { rest: post("/admin/plugins", manifest), rpc: { manifest }, headers: admin };
    },
  },
  {
    service: PluginRegistryService,
    method: "UpdatePlugin",
    prepare: async () => {
      // A new host: the answer carries new credentials.
      const id = unique("upd");
      await registerPlugin(id);
      const manifest = { plugin_type: "internal", endpoints: { echo: "/e" }, host: "localhost" };
      return {
        rest: { method: "PUT", path: `/admin/plugins/${id}`, body: manifest },
        rpc: { plugin_id: id, manifest },
        headers: admin,
      };
    },
  },
  {
    service: PluginRegistryService,
    method: "RotatePluginCredentials",
    prepare: async () => {
      const id = unique("rot");
      await registerPlugin(id);
      return {
        rest: post(`/admin/plugins/${id}:rotate-credentials`, {}),
        rpc: { plugin_id: id },
        headers: admin,
      };
    },
  },
];

const sessions: Http2SessionManager[] = [];

/** How a protocol calls a method: its status (200 when it answered) and its response headers. */
type Caller = (c: Case, p: Prepared) => Promise<{ ok: boolean; headers: Headers }>;

function rpcCaller(transport: () => Transport): Caller {
  return async (c, p) => {
    const method = c.service.methods.find((m) => m.name === c.method) as DescMethod;
    const client = createClient(c.service, transport()) as unknown as Record<
      string,
      (req: unknown, options: object) => Promise<unknown>
    >;
    let headers = new Headers();
    const call = client[method.localName];
    if (!call) throw new Error(`no client method ${method.localName}`);
    await call(fromJson(method.input, p.rpc), {
      headers: p.headers,
      onHeader: (h: Headers) => {
        headers = h;
      },
    });
    return { ok: true, headers };
  };
}

const protocols: [string, Caller][] = [
  [
    "REST",
    async (_c, p) => {
      const res = await fetch(`${server.url}${p.rest.path}`, {
        method: p.rest.method,
        headers: { "content-type": "application/json", ...p.headers },
        body: JSON.stringify(p.rest.body),
      });
      await res.arrayBuffer();
      return { ok: res.status === 200, headers: res.headers };
    },
  ],
  ["Connect", rpcCaller(() => createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }))],
  [
    "gRPC",
    rpcCaller(() => {
      const sessionManager = new Http2SessionManager(server.url);
      sessions.push(sessionManager);
      return createGrpcTransport({ baseUrl: server.url, sessionManager });
    }),
  ],
  [
    "gRPC-Web",
    rpcCaller(() => createGrpcWebTransport({ baseUrl: server.url, httpVersion: "1.1" })),
  ],
];

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("user", password, ["viewer"]);
  await server.createUser("root", password, ["admin"]);
  const key = await server.createApiKey([
    "api_keys:read",
    "api_keys:write",
    "plugins:read",
    "plugins:write",
    "service_accounts:write",
  ]);
  admin = { authorization: `Bearer ${(await loginAs("root")).token}`, "x-api-key": key };
  const sa = await callJson(
    server.url,
    "/api/admin/service-accounts",
    { name: "probe", roles: ["service"] },
    { headers: admin },
  );
  expect(sa.status).toBe(200);
  serviceAccountId = (sa.body.service_account as { service_account_id: string }).service_account_id;
  clientSecret = sa.body.client_secret as string;
});
afterAll(async () => {
  for (const s of sessions) s.abort();
  await server?.close();
});

describe("answers that carry a credential are not to be stored", () => {
  it("the table covers every method whose answer has a token, secret or recovery code", async () => {
    const withCredentials = (await allServices())
      .flatMap((s) => s.methods.filter((m) => carriesCredential(m.output)))
      .map((m) => `${m.parent.typeName}/${m.name}`)
      .sort();
    expect(cases.map((c) => `${c.service.typeName}/${c.method}`).sort()).toEqual(withCredentials);
  });

  const table = cases.flatMap((c) =>
    protocols.map(([protocol, caller]) => ({
      name: `${c.service.name}/${c.method}`,
      protocol,
      c,
      caller,
    })),
  );
  it.each(table)("$name over $protocol", async ({ c, caller }) => {
    const { ok, headers } = await caller(c, await c.prepare(counter));
    expect(ok).toBe(true);
    expect([headers.get("cache-control"), headers.get("pragma")]).toEqual(["no-store", "no-cache"]);
  });
});
