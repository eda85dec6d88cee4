import { connect as tcpConnect } from "node:net";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * OAuth 2.0 conventions on a real server: the standard form-encoded client-credentials
 * request on /auth/token (RFC 6749 §4.4, client_secret_basic and client_secret_post) with
 * RFC 6749 §5.2 errors, beside the JSON request; and the discovery document
 * (RFC 8414 / OpenID Connect Discovery) whose URLs answer.
 */

let server: TestServer;
let admin: string;
let adminKey: Record<string, string>;
const password = "oauth-test-admin-pw";

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("root", password, ["admin"]);
  const login = await callJson(server.url, "/auth/login", { username: "root", password });
  admin = login.body.token as string;
  adminKey = { "x-api-key": await server.createApiKey(["service_accounts:write"]) };
});
afterAll(async () => server?.close());

async function createAccount(name: string): Promise<{ id: string; secret: string }> {
  const res = await callJson(
    server.url,
    "/api/admin/service-accounts",
    { name, roles: ["service"] },
    { token: admin, headers: adminKey },
  );
  expect(res.status).toBe(200);
  const account = res.body.service_account as { service_account_id: string };
  return { id: account.service_account_id, secret: res.body.client_secret as string };
}

/** RFC 6749 §2.3.1: each part form-urlencoded, then `id:secret` in base64. */
const basic = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString("base64")}`;

async function postForm(fields: Record<string, string>, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}/auth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(fields).toString(),
  });
  return {
    status: res.status,
    headers: res.headers,
    body: (await res.json()) as Record<string, unknown>,
  };
}

const validate = (token: string) =>
  callJson(server.url, "/auth/validate", undefined, { token, method: "GET" });

async function failedTokenEvents(accountId: string): Promise<number> {
  const { rows } = await server.core.db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM audit_events WHERE action = 'service_token' AND outcome = 'failure' AND actor_id = $1",
    [accountId],
  );
  return rows[0]?.n ?? 0;
}

describe("form-encoded client credentials on /auth/token", () => {
  it("issues a token for HTTP Basic credentials (client_secret_basic), not cacheable", async () => {
    const { secret } = await createAccount("form-basic");
    const res = await postForm(
      { grant_type: "client_credentials" },
      { authorization: basic("form-basic", secret) },
    );
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ token_type: "Bearer", expires_in: 600 });
    expect(Object.keys(res.body).sort()).toEqual(["access_token", "expires_in", "token_type"]);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("pragma")).toBe("no-cache");
    expect(res.headers.get("x-request-id")).toBeTruthy();
    const checked = await validate(res.body.access_token as string);
    expect(checked.body).toMatchObject({
      valid: true,
      principal_type: "service",
      username: "form-basic",
    });
  });

  it("issues a token for credentials in the form (client_secret_post), audited as a service token", async () => {
    const { id, secret } = await createAccount("form-post");
    const res = await postForm({
      grant_type: "client_credentials",
      client_id: "form-post",
      client_secret: secret,
    });
    expect(res.status).toBe(200);
    expect((await validate(res.body.access_token as string)).body.valid).toBe(true);
    const { rows } = await server.core.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM audit_events WHERE action = 'service_token' AND outcome = 'success' AND actor_id = $1",
      [id],
    );
    expect(rows[0]?.n).toBe(1);
  });

  it("answers a wrong secret 401 invalid_client with WWW-Authenticate, audited and counted by the throttle like JSON failures", async () => {
    const { id, secret } = await createAccount("form-wrong");
    const wrong = `${secret.slice(0, -1)}${secret.endsWith("x") ? "y" : "x"}`;
    const viaBasic = await postForm(
      { grant_type: "client_credentials" },
      { authorization: basic("form-wrong", wrong) },
    );
    expect(viaBasic.status).toBe(401);
    expect(viaBasic.body).toMatchObject({ error: "invalid_client", reason: "INVALID_CLIENT" });
    expect(typeof viaBasic.body.error_description).toBe("string");
    expect(viaBasic.headers.get("www-authenticate")).toMatch(/^Basic realm=/);
    expect(viaBasic.headers.get("cache-control")).toBe("no-store");
    const viaForm = await postForm({
      grant_type: "client_credentials",
      client_id: "form-wrong",
      client_secret: wrong,
    });
    expect([viaForm.status, viaForm.body.error]).toEqual([401, "invalid_client"]);
    // One failure as JSON: the same counters (account + address: 3 free failures).
    const json = await callJson(server.url, "/auth/token", {
      grant_type: "client_credentials",
      client_id: "form-wrong",
      client_secret: wrong,
    });
    expect([json.status, json.reason]).toEqual([401, "INVALID_CLIENT"]);
    expect(await failedTokenEvents(id)).toBe(3);
    // The fourth attempt, even with the right secret, is refused for now.
    const throttled = await postForm({
      grant_type: "client_credentials",
      client_id: "form-wrong",
      client_secret: secret,
    });
    expect(throttled.status).toBe(429);
    expect(throttled.body).toMatchObject({
      error: "temporarily_unavailable",
      reason: "TOO_MANY_ATTEMPTS",
    });
    expect(Number(throttled.headers.get("retry-after"))).toBeGreaterThan(0);
  });

  it("names what is wrong with the grant type, scope and repeated parameters", async () => {
    const cases: [Record<string, string> | string, number, string, string][] = [
      [{ client_id: "form-x", client_secret: "s" }, 400, "invalid_request", "MISSING_GRANT_TYPE"],
      [{ grant_type: "", client_id: "form-x" }, 400, "invalid_request", "MISSING_GRANT_TYPE"],
      [
        { grant_type: "password", client_id: "form-x", client_secret: "s" },
        400,
        "unsupported_grant_type",
        "UNSUPPORTED_GRANT_TYPE",
      ],
      [
        { grant_type: "client_credentials", client_id: "form-x", scope: "admin" },
        400,
        "invalid_scope",
        "SCOPE_NOT_SUPPORTED",
      ],
      [
        "grant_type=client_credentials&client_id=a-b&client_id=c-d",
        400,
        "invalid_request",
        "DUPLICATE_PARAMETER",
      ],
      [
        { grant_type: "client_credentials", client_id: "Not A Client!", client_secret: "s" },
        400,
        "invalid_request",
        "INVALID_FIELD",
      ],
      [{ grant_type: "client_credentials" }, 401, "invalid_client", "MISSING_CLIENT_ID"],
    ];
    for (const [fields, status, error, reason] of cases) {
      const res = await fetch(`${server.url}/auth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: typeof fields === "string" ? fields : new URLSearchParams(fields).toString(),
      });
      const body = (await res.json()) as Record<string, unknown>;
      expect([res.status, body.error, body.reason], JSON.stringify(fields)).toEqual([
        status,
        error,
        reason,
      ]);
      expect(String(body.error_description)).not.toBe("");
    }
  });

  it("holds HTTP Basic credentials to the rules the form's client_id and client_secret have (400 naming the field)", async () => {
    for (const [id, secret, field] of [
      ["Not A Client!", "s", "client_id"],
      ["x", "s", "client_id"],
      ["form-basic-rules", "s".repeat(257), "client_secret"],
    ] as const) {
      const res = await postForm(
        { grant_type: "client_credentials" },
        { authorization: basic(id, secret) },
      );
      const body = res.body as Record<string, unknown>;
      expect([res.status, body.error, body.reason], id).toEqual([
        400,
        "invalid_request",
        "INVALID_FIELD",
      ]);
      expect(String(body.error_description)).toContain(field);
      // Never the secret in the answer.
      expect(JSON.stringify(body)).not.toContain("s".repeat(257));
    }
  });

  it("refuses credentials both as HTTP Basic and in the form (400 invalid_request)", async () => {
    const { secret } = await createAccount("form-both");
    const res = await postForm(
      { grant_type: "client_credentials", client_id: "form-both", client_secret: secret },
      { authorization: basic("form-both", secret) },
    );
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      error: "invalid_request",
      reason: "AMBIGUOUS_CLIENT_CREDENTIALS",
    });
  });

  it("still takes JSON, with the JSON error body", async () => {
    const { secret } = await createAccount("json-still");
    const ok = await callJson(server.url, "/auth/token", {
      grant_type: "client_credentials",
      client_id: "json-still",
      client_secret: secret,
    });
    expect(ok.status).toBe(200);
    expect(typeof ok.body.access_token).toBe("string");
    const bad = await callJson(server.url, "/auth/token", {
      grant_type: "client_credentials",
      client_id: "json-still",
      client_secret: secret,
      unknown: 1,
    });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: "invalid_argument" });
    expect(bad.body.error).toBeUndefined();
  });

  it("refuses a form larger than the body limit and a charset other than UTF-8", async () => {
    const big = await fetch(`${server.url}/auth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `grant_type=client_credentials&pad=${"a".repeat(server.config.maxBodyBytes)}`,
    });
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: string }).error).toBe("invalid_request");
    const latin = await fetch(`${server.url}/auth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded; charset=iso-8859-1" },
      body: "grant_type=client_credentials",
    });
    expect(latin.status).toBe(400);
    expect(((await latin.json()) as { reason: string }).reason).toBe("UNSUPPORTED_CHARSET");
  });
});

describe("the OpenAPI document", () => {
  it("lists the form-encoded token request beside the JSON one", async () => {
    const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as {
      paths: Record<string, { post?: { requestBody: { content: Record<string, unknown> } } }>;
    };
    const content = doc.paths["/auth/token"]?.post?.requestBody.content ?? {};
    expect(Object.keys(content).sort()).toEqual([
      "application/json",
      "application/x-www-form-urlencoded",
    ]);
    expect(content["application/x-www-form-urlencoded"]).toMatchObject({
      schema: {
        required: ["grant_type"],
        properties: { grant_type: { enum: ["client_credentials"] } },
      },
    });
  });
});

describe("/.well-known/openid-configuration", () => {
  it("describes the issuer, token endpoint and keys with absolute URLs that answer", async () => {
    const res = await fetch(`${server.url}/.well-known/openid-configuration`);
    expect(res.status).toBe(200);
    // Its URLs come from the request's Host (the issuer is not a URL): no shared cache keeps it.
    expect(res.headers.get("cache-control")).toBe("no-store");
    const doc = (await res.json()) as Record<string, unknown>;
    expect(doc).toEqual({
      issuer: server.config.jwt.issuer,
      jwks_uri: `${server.url}/.well-known/jwks.json`,
      token_endpoint: `${server.url}/auth/token`,
      token_endpoint_auth_methods_supported: ["client_secret_basic", "client_secret_post"],
      grant_types_supported: ["client_credentials"],
      id_token_signing_alg_values_supported: ["HS256"],
      response_types_supported: [],
      subject_types_supported: ["public"],
    });
    const jwks = await fetch(doc.jwks_uri as string);
    expect(jwks.status).toBe(200);
    expect(await jwks.json()).toEqual({ keys: [] });
    const { secret } = await createAccount("discovered");
    const token = await fetch(doc.token_endpoint as string, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        authorization: basic("discovered", secret),
      },
      body: "grant_type=client_credentials",
    });
    expect(token.status).toBe(200);
  });

  it("takes its host from the request", async () => {
    const alias = server.url.replace("127.0.0.1", "localhost");
    const doc = (await (await fetch(`${alias}/.well-known/openid-configuration`)).json()) as {
      token_endpoint: string;
    };
    expect(doc.token_endpoint).toBe(`${alias}/auth/token`);
  });

  it("answers a Host that is no host name with 400, not a server error", async () => {
    const { port } = new URL(server.url);
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = tcpConnect(Number(port), "127.0.0.1", () => {
        socket.end(
          "GET /.well-known/openid-configuration HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
        );
      });
      let text = "";
      socket.on("data", (c: Buffer) => {
        text += c.toString();
      });
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
    });
    expect(reply).toMatch(/^HTTP\/1\.1 400 /);
    expect(reply).toContain("INVALID_HOST");
  });
});

describe("an asymmetric issuer", () => {
  it("publishes its key, and a token it issued verifies offline through the discovered JWKS", async () => {
    const { generateKeyPairSync } = await import("node:crypto");
    const pem = generateKeyPairSync("ed25519")
      .privateKey.export({ format: "pem", type: "pkcs8" })
      .toString();
    const issuerUrl = "https://auth.example.test/tg";
    const es = await startTestServer({
      env: {
        JWT_SECRET: undefined,
        JWT_ALGORITHM: "EdDSA",
        JWT_PRIVATE_KEY: pem,
        JWT_ISSUER: issuerUrl,
      },
    });
    try {
      const discovery = await fetch(`${es.url}/.well-known/openid-configuration`);
      expect(discovery.headers.get("cache-control")).toBe("public, max-age=300");
      const doc = (await discovery.json()) as {
        issuer: string;
        jwks_uri: string;
        id_token_signing_alg_values_supported: string[];
      };
      // An http(s) issuer is the base of the URLs (the document lives under it), the same
      // for every request: caches may keep it.
      expect(doc.issuer).toBe(issuerUrl);
      expect(doc.jwks_uri).toBe(`${issuerUrl}/.well-known/jwks.json`);
      expect(doc.id_token_signing_alg_values_supported).toEqual(["EdDSA"]);
      await es.createUser("alice", password, ["viewer"]);
      const login = await callJson(es.url, "/auth/login", { username: "alice", password });
      const jwks = createRemoteJWKSet(new URL(`${es.url}/.well-known/jwks.json`));
      const { payload, protectedHeader } = await jwtVerify(login.body.token as string, jwks, {
        issuer: issuerUrl,
        audience: es.config.jwt.audience,
        algorithms: ["EdDSA"],
      });
      expect(protectedHeader.alg).toBe("EdDSA");
      expect(payload.username).toBe("alice");
    } finally {
      await es.close();
    }
  });
});
