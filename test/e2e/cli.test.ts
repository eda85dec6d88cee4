import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { afterAll, describe, expect, it } from "vitest";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import { seedDataDir } from "../support/pglite-templates.js";

/**
 * The command line as a user runs it: separate processes, the embedded
 * database in a temporary DATA_DIR, port 0.
 */

const dirs: string[] = [];

afterAll(() => {
  killAll();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-cli-"));
  dirs.push(dir);
  return dir;
}

const baseEnv = (dataDir: string): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  DATA_DIR: dataDir,
  PORT: "0",
  HOST: "127.0.0.1",
});

async function loginAndValidate(url: string, username: string, password: string) {
  const login = await fetch(`${url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  expect(login.status).toBe(200);
  const { token } = (await login.json()) as { token: string };
  const validate = await fetch(`${url}/auth/validate`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await validate.json()) as { valid: boolean; username: string; roles: string[] };
}

describe("traitgate demo", () => {
  it("starts on the embedded database, prints the admin password once, and it logs in", async () => {
    // No HOST: the demo, which prints an admin password, listens on loopback only.
    const dataDir = tempDir();
    const { HOST: _, ...env } = baseEnv(dataDir);
    const { child, output: outputNow } = await startCli(["demo"], env, /Search as each/);
    const output = outputNow();
    const listening = JSON.parse(
      output.split("\n").find((l) => l.includes("traitgate listening")) ?? "{}",
    ) as { url: string; address: string };
    expect(listening.address).toBe(`127.0.0.1:${new URL(listening.url).port}`);
    expect(output).toContain("JWT_SECRET was not set");
    expect(output).toContain("DATA_ENCRYPTION_KEY was not set");
    const url = /running at (http:\/\/\S+)/.exec(output)?.[1] ?? "";
    const password = /password: (\S+)/.exec(output)?.[1] ?? "";
    // Where the metrics are, and that they answer this (loopback) client.
    const metricsUrl = /Metrics \(Prometheus\): (\S+) \(loopback clients only/.exec(output)?.[1];
    expect(metricsUrl).toBe(`${url}/metrics`);
    const scraped = await fetch(metricsUrl ?? "");
    expect(scraped.status).toBe(200);
    expect(await scraped.text()).toContain("traitgate_rpc_requests_total");
    // Where the OpenAPI document is, and that it answers there.
    const openApiUrl = /OpenAPI 3\.1 of the REST API: (\S+)/.exec(output)?.[1];
    expect(openApiUrl).toBe(`${url}/openapi.json`);
    const openApi = await fetch(openApiUrl ?? "");
    expect(openApi.status).toBe(200);
    expect(((await openApi.json()) as { openapi: string }).openapi).toBe("3.1.0");
    // Printed to the console for the operator, never as a log line.
    const logLines = output.split("\n").filter((l) => l.startsWith("{"));
    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.join("")).not.toContain(password);
    expect(await loginAndValidate(url, "admin", password)).toMatchObject({
      valid: true,
      username: "admin",
      roles: ["admin"],
    });
    // Tokens are signed with EdDSA, its key kept in DATA_DIR (0600): another service verifies
    // them with the JWKS that the printed discovery document names, without any secret.
    expect(statSync(join(dataDir, "demo-jwt-signing.key")).mode & 0o777).toBe(0o600);
    const discoveryUrl = /OpenID\/OAuth discovery: (\S+)/.exec(output)?.[1];
    expect(discoveryUrl).toBe(`${url}/.well-known/openid-configuration`);
    const discovery = (await (await fetch(discoveryUrl ?? "")).json()) as { jwks_uri: string };
    const adminLogin = await fetch(`${url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "admin", password }),
    });
    const { token: adminToken } = (await adminLogin.json()) as { token: string };
    const verified = await jwtVerify(adminToken, createRemoteJWKSet(new URL(discovery.jwks_uri)), {
      algorithms: ["EdDSA"],
    });
    expect(verified.payload.username).toBe("admin");
    // The admin console's address is printed, and it answers there.
    expect(output).toContain(`Admin console: ${url}/console/`);
    const page = await fetch(`${url}/console/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toContain("default-src 'self'");
    expect(await page.text()).toContain('<div id="app">');
    // Retrieval is wired (plugin, allowlist, backend, sample corpus): roles see different things.
    const searchAs = async (user: string) => {
      const pw = new RegExp(`${user} \\(\\w+\\): (\\S+)`).exec(output)?.[1] ?? "";
      const login = await fetch(`${url}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ username: user, password: pw }),
      });
      const { token } = (await login.json()) as { token: string };
      const res = await fetch(`${url}/api/search`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ q: "sepsis lactate antibiotics flu", top_k: 20 }),
      });
      const body = (await res.json()) as { items: { path: string }[] };
      return [...new Set(body.items.map((i) => i.path.split("/")[0]))].sort();
    };
    expect(await searchAs("dr-lee")).toEqual(["clinical", "public", "staff"]);
    expect(await searchAs("vic")).toEqual(["public", "staff"]);
    expect(await stopCli(child)).toBe(0);
  }, 180_000);
});

describe("traitgate serve", () => {
  it.each([
    ["missing", undefined],
    ["a placeholder", "please-change-this-secret-in-production"],
    ["too short", "0123456789abcdef"],
  ])("refuses to start when JWT_SECRET is %s, naming it", async (_, secret) => {
    const env = { ...baseEnv(tempDir()), ...(secret ? { JWT_SECRET: secret } : {}) };
    const result = await runCli(["serve"], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("JWT_SECRET");
  });
});

describe("traitgate users create", () => {
  const secret = "cli-test-secret-0123456789-abcdefghijkl";
  const dataKey = Buffer.alloc(32, 3).toString("base64");

  it("creates a user with a password from the environment or stdin, who can then log in", async () => {
    const dir = seedDataDir(tempDir());
    const env = { ...baseEnv(dir), JWT_SECRET: secret, DATA_ENCRYPTION_KEY: dataKey };
    const fromEnv = await runCli(
      ["users", "create", "--username", "nurse", "--role", "clinician"],
      {
        ...env,
        TRAITGATE_PASSWORD: "nurse-password-long",
      },
    );
    expect(fromEnv.code).toBe(0);
    expect(JSON.parse(fromEnv.stdout)).toMatchObject({ username: "nurse", roles: ["clinician"] });
    expect(fromEnv.stdout + fromEnv.stderr).not.toContain("nurse-password-long");
    const fromStdin = await runCli(
      ["users", "create", "--username", "clerk", "--role", "admin"],
      env,
      "clerk-password-long\n",
    );
    expect(fromStdin.code).toBe(0);
    // Each creation committed with its user_create event (the system actor, docs/audit.md).
    const created = await runCli(["audit", "verify"], env);
    expect(created.stdout).toMatch(/audit chain intact: 2 events /);
    // The key `--url` needs below (every administrative API takes a token and a scoped key).
    const minted = await runCli(
      ["apikeys", "create", "--name", "late users", "--scope", "users:write"],
      env,
    );
    expect(minted.code, minted.stderr).toBe(0);
    const apiKey = minted.stdout.trim();

    const { child, output: outputNow } = await startCli(["serve"], env, /traitgate listening/);
    const url = listeningUrl(outputNow());
    expect(await loginAndValidate(url, "nurse", "nurse-password-long")).toMatchObject({
      valid: true,
      roles: ["clinician"],
    });
    expect(await loginAndValidate(url, "clerk", "clerk-password-long")).toMatchObject({
      valid: true,
    });
    // The server holds DATA_DIR: a second process on it is refused before it does anything,
    // naming the server's pid (issue 13, item 8: it used to print an id and lose the user).
    const late = { ...env, TRAITGATE_PASSWORD: "late-password-long" };
    const refused = await runCli(["users", "create", "--username", "late"], late);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toContain(`in use by process ${child.pid} `);
    expect(refused.stderr).toContain("--url");
    // Through the running server's API instead: an administrator's token and a key with
    // users:write from the environment.
    const login = await fetch(`${url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "clerk", password: "clerk-password-long" }),
    });
    const { token } = (await login.json()) as { token: string };
    const remote = await runCli(["users", "create", "--url", url, "--username", "late"], {
      ...late,
      TRAITGATE_TOKEN: token,
      TRAITGATE_API_KEY: apiKey,
    });
    expect(remote.code).toBe(0);
    expect(JSON.parse(remote.stdout)).toMatchObject({ username: "late", roles: [] });
    expect(await loginAndValidate(url, "late", "late-password-long")).toMatchObject({
      valid: true,
    });
    expect(await stopCli(child)).toBe(0);
    // The logins above were audited; the chain verifies from the command line.
    const verify = await runCli(["audit", "verify"], env);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toMatch(/audit chain intact: [1-9]\d* events/);
  }, 180_000);

  it("never takes a password on the command line", async () => {
    const env = { ...baseEnv(tempDir()), JWT_SECRET: secret, DATA_ENCRYPTION_KEY: dataKey };
    const result = await runCli(
      ["users", "create", "--username", "eve", "--password", "on-the-command-line"],
      env,
    );
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("--password");
  });
});

describe("traitgate service-accounts create", () => {
  const secret = "cli-test-secret-0123456789-abcdefghijkl";
  const dataKey = Buffer.alloc(32, 3).toString("base64");

  it("prints the client secret once, and it gets a service token from the server", async () => {
    const dir = seedDataDir(tempDir());
    const env = { ...baseEnv(dir), JWT_SECRET: secret, DATA_ENCRYPTION_KEY: dataKey };
    const created = await runCli(
      ["service-accounts", "create", "--name", "ai-core", "--role", "service"],
      env,
    );
    expect(created.code).toBe(0);
    const account = JSON.parse(created.stdout) as { name: string; client_secret: string };
    expect(account).toMatchObject({ name: "ai-core", roles: ["service"] });
    expect(created.stderr).toContain("shown once");
    const { child, output: outputNow } = await startCli(["serve"], env, /traitgate listening/);
    const url = listeningUrl(outputNow());
    const res = await fetch(`${url}/auth/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        grant_type: "client_credentials",
        client_id: "ai-core",
        client_secret: account.client_secret,
      }),
    });
    expect(res.status).toBe(200);
    expect(await stopCli(child)).toBe(0);
    const bad = await runCli(["service-accounts", "create", "--name", "Not Valid"], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--name");
  }, 180_000);
});
