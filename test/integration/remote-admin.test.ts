import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createApiKeyRemotely,
  createServiceAccountRemotely,
  createUserRemotely,
  RemoteError,
  remoteTarget,
} from "../../src/remote-admin.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The command line's `--url` mode (src/remote-admin.ts) against a real core: what
 * `users create`, `service-accounts create` and `apikeys create` do when the server holds the
 * embedded database. Credentials come from the environment it is given.
 */

const password = "remote-admin-test-password";
let server: TestServer;
let token = "";
let apiKey = "";

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("root", password, ["admin"]);
  await server.createUser("vera", password, ["viewer"]);
  token = await login("root");
  apiKey = await server.createApiKey(
    ["api_keys:read", "api_keys:write", "users:write", "service_accounts:write"],
    {
      name: "remote admin test",
    },
  );
});
afterAll(async () => {
  await server?.close();
});

async function login(username: string, pw = password): Promise<string> {
  const res = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password: pw }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { token: string }).token;
}

describe("--url: creation through the running server", () => {
  it("creates a user who can log in, as the administrator whose token is in the environment", async () => {
    const target = remoteTarget(
      `${server.url}/`,
      { TRAITGATE_TOKEN: token, TRAITGATE_API_KEY: apiKey },
      { needsApiKey: true },
    );
    const user = await createUserRemotely(target, {
      username: "nadia",
      email: "",
      password: "nadia-password-long",
      roles: ["clinician"],
    });
    expect(user).toEqual({ id: expect.any(String), username: "nadia", roles: ["clinician"] });
    expect(await login("nadia", "nadia-password-long")).not.toBe("");
  });

  it("creates a service account whose client secret gets a token", async () => {
    const target = remoteTarget(
      server.url,
      { TRAITGATE_TOKEN: token, TRAITGATE_API_KEY: apiKey },
      { needsApiKey: true },
    );
    const account = await createServiceAccountRemotely(target, {
      name: "remote-svc",
      description: "",
      roles: ["service"],
    });
    expect(account).toMatchObject({ name: "remote-svc", roles: ["service"] });
    const res = await fetch(`${server.url}/auth/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        grant_type: "client_credentials",
        client_id: "remote-svc",
        client_secret: account.client_secret,
      }),
    });
    expect(res.status).toBe(200);
  });

  it("creates an API key with the key in TRAITGATE_API_KEY, and the new key works", async () => {
    const target = remoteTarget(
      server.url,
      { TRAITGATE_TOKEN: token, TRAITGATE_API_KEY: apiKey },
      { needsApiKey: true },
    );
    const created = await createApiKeyRemotely(target, {
      name: "made remotely",
      scopes: ["api_keys:read"],
      expiresAt: new Date(Date.now() + 86_400_000),
    });
    expect(created.key).toMatch(/^tgk_[a-z2-7]{8}_/);
    const list = await fetch(`${server.url}/api/admin/api-keys`, {
      headers: { authorization: `Bearer ${token}`, "x-api-key": created.key },
    });
    expect(list.status).toBe(200);
  });

  it("says what is missing, and ends with the server's refusal and its reason", async () => {
    expect(() => remoteTarget(server.url, {})).toThrow(/TRAITGATE_TOKEN/);
    expect(() =>
      remoteTarget(server.url, { TRAITGATE_TOKEN: token }, { needsApiKey: true }),
    ).toThrow(/TRAITGATE_API_KEY/);
    expect(() => remoteTarget("localhost:8080", { TRAITGATE_TOKEN: token })).toThrow(/--url/);
    const viewer = remoteTarget(server.url, {
      TRAITGATE_TOKEN: await login("vera"),
      TRAITGATE_API_KEY: apiKey,
    });
    const denied = createUserRemotely(viewer, {
      username: "nope",
      email: "",
      password: "nope-password-long",
      roles: [],
    });
    await expect(denied).rejects.toThrow(RemoteError);
    await expect(denied).rejects.toMatchObject({ exitCode: 1, message: /403 ROLE/ });
    const admin = remoteTarget(server.url, { TRAITGATE_TOKEN: token, TRAITGATE_API_KEY: apiKey });
    const invalid = createUserRemotely(admin, {
      username: "x",
      email: "",
      password: "short",
      roles: [],
    });
    await expect(invalid).rejects.toMatchObject({ exitCode: 2, message: /400 / });
  });
});
