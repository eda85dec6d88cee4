import { connect as h2connect } from "node:http2";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettingsService } from "../../gen/traitgate/settings/v1/settings_pb.js";
import {
  corsAllowedHeaders,
  corsExposedHeaders,
  corsMaxAgeSeconds,
} from "../../src/server/cors.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * CORS (issue 16 item 4, docs/api.md "CORS") on a real core: off by default; once
 * `http.cors_allowed_origins` lists an origin, preflights and answers on REST, Connect and
 * gRPC-Web paths carry the CORS headers for that origin only; a change applies without a
 * restart; console paths never get CORS headers; bad values are refused naming the setting.
 */

const password = "cors-admin-password";
const app = "https://app.example.com";
const other = "https://evil.example.net";
const settingsPath = "/api/admin/settings";
const getSettingsPath = `/${SettingsService.typeName}/GetSettings`;
const updateSettingsPath = `/${SettingsService.typeName}/UpdateSettings`;
let server: TestServer;
let token = "";
let key = "";

const auth = () => ({ authorization: `Bearer ${token}`, "x-api-key": key });

async function setOrigins(value: string | null): Promise<Response> {
  return fetch(`${server.url}${settingsPath}`, {
    method: "POST",
    headers: { ...auth(), "content-type": "application/json" },
    body: JSON.stringify({ "http.cors_allowed_origins": value }),
  });
}

/** A browser's preflight for `method` on `path`, from `origin`. */
function preflight(path: string, origin: string, method = "POST", headers = "content-type") {
  return fetch(`${server.url}${path}`, {
    method: "OPTIONS",
    headers: {
      origin,
      "access-control-request-method": method,
      "access-control-request-headers": headers,
    },
  });
}

const corsHeadersOf = (res: Response) =>
  [...res.headers.keys()].filter((name) => name.startsWith("access-control-"));

/** Clients as a browser script on `origin` would use them, keeping every answer's headers. */
function browserClients(origin: string) {
  const answers: Response[] = [];
  const fetchFrom: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set("origin", origin);
    const res = await fetch(input, { ...init, headers });
    answers.push(res);
    return res;
  };
  const options = { baseUrl: server.url, fetch: fetchFrom };
  return {
    answers,
    connect: createClient(SettingsService, createConnectTransport(options)),
    grpcWeb: createClient(SettingsService, createGrpcWebTransport(options)),
  };
}

beforeAll(async () => {
  server = await startTestServer({ env: { LOG_LEVEL: "info" } });
  await server.createUser("root", password, ["admin"]);
  const login = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username: "root", password }),
  });
  token = ((await login.json()) as { token: string }).token;
  key = await server.createApiKey(["settings:read", "settings:write"]);
});
afterAll(async () => server?.close());

describe("CORS", () => {
  it("is off by default: no CORS headers on preflights or answers, even for a later allowed origin", async () => {
    const settings = await fetch(`${server.url}${settingsPath}`, { headers: auth() });
    expect(
      ((await settings.json()) as { settings: Record<string, unknown> }).settings,
    ).toMatchObject({ "http.cors_allowed_origins": "" });
    const pre = await preflight(settingsPath, app, "GET", "authorization,x-api-key");
    expect(corsHeadersOf(pre)).toEqual([]);
    expect(pre.status).toBe(405);
    const answer = await fetch(`${server.url}${settingsPath}`, {
      headers: { ...auth(), origin: app },
    });
    expect(answer.status).toBe(200);
    expect(corsHeadersOf(answer)).toEqual([]);
    expect(answer.headers.get("vary")).toBeNull();
    const { connect, answers } = browserClients(app);
    await connect.getSettings({}, { headers: auth() });
    expect(corsHeadersOf(answers[0] as Response)).toEqual([]);
  });

  it.each([
    ["*", "*"],
    ["a path", "https://app.example.com/"],
    ["an upper-case host", "https://App.example.com"],
    ["a default port", "https://app.example.com:443"],
    ["another scheme", "ftp://app.example.com"],
    ["not a URL", "app.example.com"],
    ["one bad entry among good ones", `${app}, http://localhost:3000/x`],
  ])("refuses %s with 400 naming the setting, and changes nothing", async (_, value) => {
    const res = await setOrigins(value);
    expect(res.status).toBe(400);
    const body = (await res.json()) as {
      code: string;
      message: string;
      details: { reason: string; metadata: Record<string, string> }[];
    };
    expect(body.code).toBe("invalid_argument");
    expect(body.details[0]?.reason).toBe("INVALID_SETTING");
    expect(body.details[0]?.metadata).toMatchObject({
      field: "http.cors_allowed_origins",
      problems: "BAD_FORMAT",
    });
    expect(body.message).toContain("http.cors_allowed_origins");
    expect(server.core.settings.current().values["http.cors_allowed_origins"]).toBe("");
  });

  it("refuses a value that is not a string", async () => {
    const res = await fetch(`${server.url}${settingsPath}`, {
      method: "POST",
      headers: { ...auth(), "content-type": "application/json" },
      body: JSON.stringify({ "http.cors_allowed_origins": [app] }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { details: { metadata: Record<string, string> }[] };
    expect(body.details[0]?.metadata).toMatchObject({
      field: "http.cors_allowed_origins",
      problems: "WRONG_TYPE",
    });
  });

  describe("with an origin allowed", () => {
    beforeAll(async () => {
      expect((await setOrigins(`${app}, http://localhost:5173`)).status).toBe(200);
    });
    afterAll(async () => {
      expect((await setOrigins(null)).status).toBe(200);
    });

    it.each([
      ["a REST path", settingsPath, "GET", "GET, POST"],
      ["a Connect path of a side-effect-free method", getSettingsPath, "POST", "POST, GET"],
      ["a Connect or gRPC-Web path", updateSettingsPath, "POST", "POST"],
      ["the OpenAPI document", "/openapi.json", "GET", "GET, HEAD"],
    ])("answers the preflight of %s from the allowed origin", async (_, path, method, methods) => {
      const res = await preflight(
        path,
        app,
        method,
        "authorization,x-api-key,content-type,connect-protocol-version,x-grpc-web,x-user-agent",
      );
      expect(res.status).toBe(204);
      expect(res.headers.get("access-control-allow-origin")).toBe(app);
      expect(res.headers.get("access-control-allow-methods")).toBe(methods);
      const allowed = (res.headers.get("access-control-allow-headers") ?? "").split(", ");
      for (const h of [
        "authorization",
        "x-api-key",
        "content-type",
        "connect-protocol-version",
        "connect-timeout-ms",
        "x-grpc-web",
        "x-user-agent",
        "grpc-timeout",
        "x-request-id",
        "if-match",
      ]) {
        expect(allowed).toContain(h);
      }
      expect(res.headers.get("access-control-max-age")).toBe(String(corsMaxAgeSeconds));
      expect(res.headers.get("vary")).toContain("Origin");
      expect(res.headers.get("access-control-allow-credentials")).toBeNull();
    });

    it.each([
      ["a REST path", settingsPath],
      ["a Connect path", getSettingsPath],
    ])(
      "refuses the preflight of %s from another origin: 403 without CORS headers",
      async (_, path) => {
        const res = await preflight(path, other);
        expect(res.status).toBe(403);
        expect(corsHeadersOf(res)).toEqual([]);
        expect(res.headers.get("vary")).toContain("Origin");
        const body = (await res.json()) as { details: { reason: string }[] };
        expect(body.details[0]?.reason).toBe("CORS_ORIGIN_NOT_ALLOWED");
      },
    );

    it("answers a REST call from the allowed origin with CORS headers, from another without", async () => {
      const ok = await fetch(`${server.url}${settingsPath}`, {
        headers: { ...auth(), origin: app },
      });
      expect(ok.status).toBe(200);
      expect(ok.headers.get("access-control-allow-origin")).toBe(app);
      expect(ok.headers.get("access-control-expose-headers")).toBe(corsExposedHeaders);
      for (const h of ["etag", "retry-after", "x-request-id", "grpc-status", "grpc-message"]) {
        expect(corsExposedHeaders.split(", ")).toContain(h);
      }
      expect(ok.headers.get("vary")).toBe("Origin");
      expect(ok.headers.get("etag")).not.toBeNull();

      const refused = await fetch(`${server.url}${settingsPath}`, {
        headers: { ...auth(), origin: other },
      });
      expect(refused.status).toBe(200);
      expect(corsHeadersOf(refused)).toEqual([]);
      expect(refused.headers.get("vary")).toBe("Origin");
    });

    it("answers Connect and gRPC-Web calls (also refusals) from the allowed origin with CORS headers", async () => {
      const { connect, grpcWeb, answers } = browserClients(app);
      const viaConnect = await connect.getSettings({}, { headers: auth() });
      expect(viaConnect.settings?.["http.cors_allowed_origins"]).toBe(
        `${app}, http://localhost:5173`,
      );
      const viaGrpcWeb = await grpcWeb.getSettings({}, { headers: auth() });
      expect(viaGrpcWeb.version).toBe(viaConnect.version);
      const refusal = await grpcWeb.getSettings({}).catch((e: unknown) => ConnectError.from(e));
      expect(refusal).toBeInstanceOf(ConnectError);
      expect((refusal as ConnectError).code).toBe(Code.Unauthenticated);
      expect(answers).toHaveLength(3);
      for (const res of answers) {
        expect(res.headers.get("access-control-allow-origin")).toBe(app);
        expect(res.headers.get("access-control-expose-headers")).toBe(corsExposedHeaders);
      }
    });

    it("answers Connect and gRPC-Web calls from another origin without CORS headers", async () => {
      const { connect, grpcWeb, answers } = browserClients(other);
      await connect.getSettings({}, { headers: auth() });
      await grpcWeb.getSettings({}, { headers: auth() });
      expect(answers).toHaveLength(2);
      for (const res of answers) expect(corsHeadersOf(res)).toEqual([]);
    });

    it("answers a preflight over HTTP/2 (h2c) too", async () => {
      const session = h2connect(server.url);
      try {
        const headers = await new Promise<Record<string, unknown>>((resolve, reject) => {
          const stream = session.request({
            ":method": "OPTIONS",
            ":path": getSettingsPath,
            origin: app,
            "access-control-request-method": "POST",
          });
          stream.on("response", (h) => resolve(h));
          stream.on("error", reject);
          stream.resume();
          stream.end();
        });
        expect(headers[":status"]).toBe(204);
        expect(headers["access-control-allow-origin"]).toBe(app);
        expect(headers["access-control-allow-methods"]).toBe("POST, GET");
      } finally {
        session.close();
      }
    });

    it("never puts CORS headers on console paths", async () => {
      for (const path of ["/console/", "/console/api/session", "/console/rpc/x"]) {
        const pre = await preflight(path, app);
        expect(corsHeadersOf(pre)).toEqual([]);
        const res = await fetch(`${server.url}${path}`, { headers: { origin: app } });
        expect(corsHeadersOf(res)).toEqual([]);
        expect(res.headers.get("vary") ?? "").not.toContain("Origin");
      }
    });

    it("follows a change of the setting without a restart", async () => {
      expect((await preflight(settingsPath, app)).status).toBe(204);
      expect((await preflight(settingsPath, other)).status).toBe(403);
      expect((await setOrigins(other)).status).toBe(200);
      expect(
        (await preflight(settingsPath, other)).headers.get("access-control-allow-origin"),
      ).toBe(other);
      const former = await preflight(settingsPath, app);
      expect(former.status).toBe(403);
      expect(corsHeadersOf(former)).toEqual([]);
      expect((await setOrigins("")).status).toBe(200);
      const off = await preflight(settingsPath, other);
      expect(off.status).toBe(405);
      expect(corsHeadersOf(off)).toEqual([]);
      expect((await setOrigins(app)).status).toBe(200);
    });
  });

  it("allows the headers Connect's own CORS constants list", async () => {
    const { cors } = await import("@connectrpc/connect");
    for (const h of cors.allowedHeaders) expect(corsAllowedHeaders).toContain(h.toLowerCase());
    for (const h of cors.exposedHeaders) expect(corsExposedHeaders).toContain(h.toLowerCase());
  });
});
