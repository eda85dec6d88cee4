import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import {
  openTestPostgres,
  postgresUrlFor,
  schemaConnection,
  testSchemaName,
} from "../support/database.js";
import { callJson, type JsonReply } from "../support/http.js";

/**
 * Two `traitgate serve` processes (replicas A and B) on one PostgreSQL database, as behind a
 * load balancer (docs/operations.md, "Several replicas"): every per-process cache B holds is
 * brought in line with a change made through A within its bound of one second, with no
 * restart and no help from the test. Before each change B has just answered from the state
 * being changed (so it is in B's cache); after it, B is polled until it answers the new
 * state. The deadline is the bound plus one second for the polling calls themselves on this
 * shared machine: a cache kept longer (or until a restart) fails; a time is not asserted.
 */

const url = postgresUrlFor("replicas on two processes");
const boundMs = 1_000;
const deadlineMs = boundMs + 1_000;
const password = "replicas-two-processes-pw";

interface Replica {
  child: Awaited<ReturnType<typeof startCli>>["child"];
  output: () => string;
  url: string;
}

/** Asks `probe` until it returns `want`; throws with the last answer past the deadline. */
async function eventually<T>(probe: () => Promise<T>, want: T): Promise<number> {
  const started = performance.now();
  let last: T | undefined;
  while (performance.now() - started < deadlineMs) {
    last = await probe();
    if (last === want) return performance.now() - started;
    await sleep(20);
  }
  throw new Error(`not within ${deadlineMs} ms: still ${JSON.stringify(last)}, want ${want}`);
}

describe.skipIf(!url)(
  "caches of two serve processes on one PostgreSQL",
  { timeout: 120_000 },
  () => {
    let db: Database;
    let a: Replica;
    let b: Replica;
    let admin: Record<string, string> = {};
    const waited: Record<string, number> = {};

    const on = (r: Replica, path: string, body?: unknown, method = "POST", extra = {}) =>
      callJson(r.url, path, body, { method, headers: { ...admin, ...extra } });
    const login = async (r: Replica, username: string) =>
      (await callJson(r.url, "/auth/login", { username, password })).body.token as string;
    const validity = async (r: Replica, token: string) => {
      const res = await fetch(`${r.url}/auth/validate`, {
        headers: { authorization: `Bearer ${token}` },
      });
      const body = (await res.json()) as { valid: boolean; reason?: string };
      return body.valid ? "valid" : (body.reason ?? "invalid");
    };

    beforeAll(async () => {
      const base = url ?? "";
      const schema = testSchemaName();
      db = await openTestPostgres(base, schema);
      await migrate(db, silentLogger);
      const env: NodeJS.ProcessEnv = {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        DB_CONNECTION: schemaConnection(base, schema),
        JWT_SECRET: "replicas-two-processes-secret-0123456789",
        DATA_ENCRYPTION_KEY: Buffer.alloc(32, 5).toString("base64"),
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: "info",
      };
      for (const [username, roles] of [
        ["root", ["admin"]],
        ["alice", []],
        ["bob", []],
      ] as const) {
        const created = await runCli(
          ["users", "create", "--username", username, ...roles.flatMap((r) => ["--role", r])],
          { ...env, TRAITGATE_PASSWORD: password },
        );
        expect(created.code, created.stderr).toBe(0);
      }
      const scopes = [
        "api_keys:write",
        "users:read",
        "users:write",
        "settings:read",
        "settings:write",
        "policy:read",
        "policy:write",
        "plugins:write",
        "operator:write",
        "service_accounts:write",
      ];
      const key = await runCli(
        ["apikeys", "create", "--name", "replicas", ...scopes.flatMap((s) => ["--scope", s])],
        env,
      );
      expect(key.code, key.stderr).toBe(0);
      const started = await Promise.all([
        startCli(["serve"], env, /traitgate listening/),
        startCli(["serve"], env, /traitgate listening/),
      ]);
      [a, b] = started.map(({ child, output }) => ({
        child,
        output,
        url: listeningUrl(output()),
      })) as [Replica, Replica];
      admin = { authorization: `Bearer ${await login(a, "root")}`, "x-api-key": key.stdout.trim() };
    });
    afterAll(async () => {
      // Figures for the report: how long B took to follow each change (polls included).
      if (Object.keys(waited).length > 0) console.info("replicas: B followed A in (ms)", waited);
      for (const r of [a, b]) {
        if (r) expect(await stopCli(r.child)).toBe(0);
      }
      killAll();
      await db?.close();
    });

    it("an API key revoked on A is refused on B", async () => {
      const created = await on(a, "/api/admin/api-keys", { name: "short", scopes: ["users:read"] });
      expect(created.status).toBe(200);
      const id = (created.body.api_key as { key_id: string }).key_id;
      const useOnB = async () =>
        (await on(b, "/api/admin/users", undefined, "GET", { "x-api-key": created.body.key }))
          .status;
      expect(await useOnB()).toBe(200);
      expect((await on(a, `/api/admin/api-keys/${id}:revoke`, {})).status).toBe(200);
      waited.apiKeyRevocation = await eventually(useOnB, 401);
    });

    it("a session logged out on A is refused on B", async () => {
      const token = await login(a, "alice");
      expect(await validity(b, token)).toBe("valid");
      const out = await callJson(a.url, "/auth/logout", {}, { token });
      expect(out.status).toBe(200);
      waited.sessionRevocation = await eventually(() => validity(b, token), "revoked");
    });

    it("a user deactivated on A is refused on B", async () => {
      const users = await on(a, "/api/admin/users", undefined, "GET");
      const bob = (users.body.users as { user_id: string; username: string }[]).find(
        (u) => u.username === "bob",
      );
      const token = await login(a, "bob");
      expect(await validity(b, token)).toBe("valid");
      const patched = await on(
        a,
        `/api/admin/users/${bob?.user_id}`,
        { is_active: false },
        "PATCH",
      );
      expect(patched.status, JSON.stringify(patched.body)).toBe(200);
      waited.userDeactivation = await eventually(() => validity(b, token), "user_inactive");
    });

    describe("the gateway", () => {
      let aiCore = "";
      // No process listens on port 9 (discard): a call B lets through ends as PLUGIN_UNAVAILABLE.
      const callOnB = async () => {
        const reply: JsonReply = await callJson(
          b.url,
          "/gateway/shared/rag_query",
          { caller_plugin: "ai-core", payload: {} },
          { token: aiCore },
        );
        return reply.reason ?? String(reply.status);
      };

      beforeAll(async () => {
        const sa = await on(a, "/api/admin/service-accounts", {
          name: "ai-core",
          roles: ["service"],
        });
        expect(sa.status).toBe(200);
        const plugin = await on(a, "/admin/plugins", {
          id: "shared",
          plugin_type: "internal",
          endpoints: { rag_query: "/rag/query" },
          port: 9,
        });
        expect(plugin.status).toBe(200);
        const entry = { caller: "ai-core", target: "shared", operations: ["rag_query"] };
        expect((await on(a, "/admin/operator/allowlist", entry, "PUT")).status).toBe(200);
        const token = await callJson(a.url, "/auth/token", {
          grant_type: "client_credentials",
          client_id: "ai-core",
          client_secret: sa.body.client_secret,
        });
        aiCore = token.body.access_token as string;
      });

      it("a plugin disabled on A is refused on B, and enabled again", async () => {
        expect(await callOnB()).toBe("PLUGIN_UNAVAILABLE");
        expect((await on(a, "/admin/plugins/shared:disable", {})).status).toBe(200);
        // A disabled plugin is answered as one that does not exist (docs/operator-lane.md).
        waited.pluginDisable = await eventually(callOnB, "PLUGIN_NOT_FOUND");
        expect((await on(a, "/admin/plugins/shared:enable", {})).status).toBe(200);
        waited.pluginEnable = await eventually(callOnB, "PLUGIN_UNAVAILABLE");
      });

      it("an allowlist entry removed on A is refused on B, and added again", async () => {
        expect(await callOnB()).toBe("PLUGIN_UNAVAILABLE");
        const removed = await on(
          a,
          "/admin/operator/allowlist?caller=ai-core&target=shared",
          undefined,
          "DELETE",
        );
        expect(removed.status).toBe(200);
        waited.allowlistRemoval = await eventually(callOnB, "NOT_ALLOWLISTED");
        const entry = { caller: "ai-core", target: "shared", operations: ["rag_query"] };
        expect((await on(a, "/admin/operator/allowlist", entry, "PUT")).status).toBe(200);
        waited.allowlistAddition = await eventually(callOnB, "PLUGIN_UNAVAILABLE");
      });
    });

    it("a policy version activated on A decides on B (after the gateway's tests: it replaces the policy that lets ai-core call)", async () => {
      const evaluateOnB = async () =>
        (await on(b, "/api/policy/evaluate", { traits: ["role:admin"], context: "SEARCH" })).body
          .deciding_rule as string | undefined;
      expect(await evaluateOnB()).not.toBe("replicas-rule");
      const document = {
        rules: [
          {
            id: "replicas-rule",
            description: "two processes",
            contexts: ["SEARCH"],
            when: { all: ["role:admin"] },
            decision: "allow",
          },
        ],
      };
      const put = await on(a, "/api/admin/policy/versions", { document, activate: true });
      expect(put.status).toBe(200);
      waited.policyActivation = await eventually(evaluateOnB, "replicas-rule");
    });

    it("a setting changed on A applies on B (its log level)", async () => {
      const changedOnB = async () => b.output().includes('"log level changed"');
      expect(await changedOnB()).toBe(false);
      const res = await on(a, "/api/admin/settings", { log_level: "debug" });
      expect(res.status).toBe(200);
      waited.settingsChange = await eventually(changedOnB, true);
      expect(b.output()).toMatch(/"log_level":"debug".*"msg":"log level changed"/);
    });
  },
);
