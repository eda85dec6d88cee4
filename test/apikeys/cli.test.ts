import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { killAll, runCli, startCli, stopCli } from "../support/cli.js";
import { seedDataDir } from "../support/pglite-templates.js";

/**
 * `traitgate apikeys create`, `traitgate audit export` and the demo's key, as a user runs
 * them: separate processes on the embedded database in a temporary DATA_DIR, port 0.
 */

const keyPattern = /^tgk_[a-z2-7]{8}_[A-Za-z0-9_-]{43}$/;
const secret = "apikeys-cli-secret-0123456789-abcdefghij";
const dataKey = Buffer.alloc(32, 5).toString("base64");
const dirs: string[] = [];

afterAll(() => {
  killAll();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function env(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  // A migrated embedded database already there: no initdb per command (what is tested here
  // is the commands, not a first start).
  const dir = seedDataDir(mkdtempSync(join(tmpdir(), "traitgate-apikeys-")));
  dirs.push(dir);
  return {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATA_DIR: dir,
    PORT: "0",
    HOST: "127.0.0.1",
    ...extra,
  };
}

async function login(url: string, username: string, password: string): Promise<string> {
  const res = await fetch(`${url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { token: string }).token;
}

const listKeys = (url: string, token: string, key: string) =>
  fetch(`${url}/api/admin/api-keys`, {
    headers: { authorization: `Bearer ${token}`, "x-api-key": key },
  });

describe("traitgate apikeys create", { timeout: 180_000 }, () => {
  it("prints the key alone on stdout; the key then works with an admin's token; export shows it audited", async () => {
    const e = env({ JWT_SECRET: secret, DATA_ENCRYPTION_KEY: dataKey });
    const created = await runCli(
      [
        "apikeys",
        "create",
        "--name",
        "bootstrap",
        "--scope",
        "api_keys:read",
        "--scope",
        "api_keys:write",
        "--expires-in-days",
        "30",
      ],
      e,
    );
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout).toMatch(/^tgk_\S+\n$/);
    const key = created.stdout.trim();
    expect(key).toMatch(keyPattern);
    expect(created.stderr).toMatch(/shown only this once/);
    expect(created.stderr).toContain("api_keys:read, api_keys:write");
    expect(created.stderr).not.toContain(key.slice(13));

    const user = await runCli(["users", "create", "--username", "root", "--role", "admin"], {
      ...e,
      TRAITGATE_PASSWORD: "root-password-for-cli",
    });
    expect(user.code).toBe(0);

    const { child, output } = await startCli(["serve"], e, /traitgate listening/);
    const url = (
      JSON.parse(
        output()
          .split("\n")
          .find((l) => l.includes("traitgate listening")) ?? "{}",
      ) as {
        url: string;
      }
    ).url;
    const token = await login(url, "root", "root-password-for-cli");
    const res = await listKeys(url, token, key);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { api_keys: Record<string, unknown>[] };
    expect(body.api_keys).toEqual([
      expect.objectContaining({
        name: "bootstrap",
        prefix: key.slice(0, 12),
        created_by: "",
        scopes: ["api_keys:read", "api_keys:write"],
      }),
    ]);
    expect((await listKeys(url, token, `${key.slice(0, 13)}${"x".repeat(43)}`)).status).toBe(401);
    expect(await stopCli(child)).toBe(0);
    expect(output()).not.toContain(key.slice(13));

    const exported = await runCli(["audit", "export", "--action", "api_key_create"], e);
    expect(exported.code, exported.stderr).toBe(0);
    const lines = exported.stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toEqual([
      expect.objectContaining({
        action: "api_key_create",
        actor_type: "system",
        actor_id: null,
        outcome: "success",
        details: expect.objectContaining({ name: "bootstrap", via: "cli" }),
      }),
    ]);
    expect(exported.stderr).toContain("audit export: 1 events");
    const everything = await runCli(["audit", "export"], e);
    const actions = everything.stdout
      .trimEnd()
      .split("\n")
      .map((l) => (JSON.parse(l) as { action: string }).action);
    expect(actions).toContain("api_key_list");
    expect(actions.indexOf("api_key_create")).toBeLessThan(actions.indexOf("api_key_list"));
  });

  it("refuses unknown scopes and bad options, naming them, and creates nothing", async () => {
    const e = env({ JWT_SECRET: secret, DATA_ENCRYPTION_KEY: dataKey });
    const unknown = await runCli(
      ["apikeys", "create", "--name", "x", "--scope", "settings:read", "--scope", "root:all"],
      e,
    );
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("root:all");
    expect(unknown.stderr).toContain("--scope");
    expect(unknown.stdout).toBe("");
    const noScope = await runCli(["apikeys", "create", "--name", "x"], e);
    expect(noScope.code).toBe(2);
    expect(noScope.stderr).toContain("--scope");
    const days = await runCli(
      ["apikeys", "create", "--name", "x", "--scope", "audit:read", "--expires-in-days", "400"],
      e,
    );
    expect(days.code).toBe(2);
    expect(days.stderr).toContain("--expires-in-days");
    const badExport = await runCli(["audit", "export", "--outcome", "meh"], e);
    expect(badExport.code).toBe(2);
    expect(badExport.stderr).toContain("--outcome");
    const exported = await runCli(["audit", "export", "--action", "api_key_create"], e);
    expect(exported.stdout).toBe("");
  });

  it("creates keys for user and service account administration", async () => {
    const e = env({ JWT_SECRET: secret, DATA_ENCRYPTION_KEY: dataKey });
    const scopes = ["users:read", "users:write", "service_accounts:read", "service_accounts:write"];
    const created = await runCli(
      ["apikeys", "create", "--name", "people", ...scopes.flatMap((s) => ["--scope", s])],
      e,
    );
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout.trim()).toMatch(keyPattern);
    expect(created.stderr).toContain(scopes.join(", "));
  });
});

describe("traitgate demo", { timeout: 180_000 }, () => {
  it("prints an API key next to the admin password; a new run revokes the last run's key", async () => {
    const e = env();
    const first = await startCli(["demo"], e, /api key: \S+\n[\s\S]*Try:/);
    const out1 = first.output();
    const url1 = /running at (http:\/\/\S+)/.exec(out1)?.[1] ?? "";
    const password1 = /password: (\S+)/.exec(out1)?.[1] ?? "";
    const key1 = /api key: (\S+)/.exec(out1)?.[1] ?? "";
    expect(key1).toMatch(keyPattern);
    expect(out1.split(key1).length - 1).toBe(1);
    const logLines = out1.split("\n").filter((l) => l.startsWith("{"));
    expect(logLines.join("")).not.toContain(key1.slice(13));
    const token1 = await login(url1, "admin", password1);
    expect((await listKeys(url1, token1, key1)).status).toBe(200);
    // The key holds what the docs' examples need, every administrative API included.
    for (const path of [
      "/api/admin/users",
      "/api/admin/service-accounts",
      "/api/admin/settings",
      "/api/admin/policy/versions/active",
      "/admin/plugins",
      "/admin/operator/allowlist",
    ]) {
      const res = await fetch(`${url1}${path}`, {
        headers: { authorization: `Bearer ${token1}`, "x-api-key": key1 },
      });
      expect(res.status, path).toBe(200);
    }
    // And it can hand on any of its scopes to a narrower key (no scope it lacks, no escalation).
    const narrower = await fetch(`${url1}/api/admin/api-keys`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${token1}`,
        "x-api-key": key1,
        "content-type": "application/json",
      },
      body: JSON.stringify({ name: "ops", scopes: ["plugins:write", "operator:write"] }),
    });
    expect(narrower.status).toBe(200);
    const audit = await fetch(`${url1}/api/admin/audit?action=api_key_create`, {
      headers: { authorization: `Bearer ${token1}`, "x-api-key": key1 },
    });
    expect(audit.status).toBe(200);
    expect(await stopCli(first.child)).toBe(0);

    const second = await startCli(["demo"], e, /api key: \S+\n[\s\S]*Try:/);
    const out2 = second.output();
    const url2 = /running at (http:\/\/\S+)/.exec(out2)?.[1] ?? "";
    const key2 = /api key: (\S+)/.exec(out2)?.[1] ?? "";
    const token2 = await login(url2, "admin", /password: (\S+)/.exec(out2)?.[1] ?? "");
    expect(key2).not.toBe(key1);
    expect((await listKeys(url2, token2, key2)).status).toBe(200);
    expect((await listKeys(url2, token2, key1)).status).toBe(401);
    expect(await stopCli(second.child)).toBe(0);
  });
});
