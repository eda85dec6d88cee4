import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoginRequestSchema } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { allScopes } from "../../src/apikeys/scopes.js";
import { exportLine, readAuditEvents } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { type RagPlugin, startRagPlugin } from "../../src/rag/plugin.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import type { JsonReply } from "../support/http.js";
import { sendGrpc, sendJson } from "../support/origin-client.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Every audit event a request causes records where the request came from: the client's
 * address and its User-Agent (docs/audit.md, "Where a request came from"). Table-driven over
 * every audited action a request can cause, each driven through the API of a real core, on
 * PGlite and on PostgreSQL (TEST_DATABASE_URL). Every request goes through a trusted proxy
 * (127.0.0.2, in TRUSTED_PROXIES) that names the client in X-Forwarded-For, so an event that
 * records the TCP peer instead of the resolved client fails as surely as one without an
 * origin.
 */

const proxy = "127.0.0.2";
const client = "203.0.113.50";
const password = "audit-origin-password";
const otherPassword = "audit-origin-other-pw";

/** The TOTP code of `secret` `steps` steps from now. */
const totp = (secret: string, steps = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

/** A request sent by a case: its id and User-Agent, and the answer. */
interface Sent {
  id: string;
  agent: string;
  reply: JsonReply;
}

/**
 * What a case's request must have written: an event of `action` with `outcome`, and one of
 * each action of `also` (the core's own calls to a plugin, say).
 */
interface Case {
  name: string;
  action: string;
  outcome: string;
  also?: string[];
  run: () => Promise<Sent>;
}

describe.each(databaseTargets())("the origin of audited requests, on $name", (target) => {
  let server: TestServer;
  let rag: RagPlugin | undefined;
  let ragDir = "";
  let sent = 0;
  const state = {
    admin: "",
    key: "",
    user: { id: "", token: "", secret: "", recovery: [] as string[] },
    mfaUser: { id: "", token: "" },
    apiKeyId: "",
    account: { id: "", secret: "", token: "" },
    pluginPort: 1,
    policyVersion: "",
    previousPolicy: "",
  };

  /** One JSON request through the proxy, with its own request id and User-Agent. */
  async function via(
    method: string,
    path: string,
    body?: unknown,
    options: { token?: string; key?: string; forwardedFor?: string } = {},
  ): Promise<Sent> {
    const id = `origin-${++sent}`;
    const agent = `origin-test/1.0 (${method} ${path.split("?")[0]}; ${id})`;
    const reply = await sendJson(server.url, path, body, {
      from: proxy,
      method,
      token: options.token,
      headers: {
        "x-forwarded-for": options.forwardedFor ?? client,
        "user-agent": agent,
        "x-request-id": id,
        ...(options.key ? { "x-api-key": options.key } : {}),
      },
    });
    return { id, agent, reply };
  }

  const asAdmin = (method: string, path: string, body?: unknown) =>
    via(method, path, body ?? (method === "GET" || method === "DELETE" ? undefined : {}), {
      token: state.admin,
      key: state.key,
    });

  const ok = (s: Sent): Sent => {
    expect(s.reply.status, `${s.id}: ${JSON.stringify(s.reply.body)}`).toBe(200);
    return s;
  };

  async function eventsOf(requestId: string) {
    const { rows } = await server.core.db.query<{
      action: string;
      outcome: string;
      client_address: string | null;
      user_agent: string | null;
    }>(
      `SELECT action, outcome, client_address, user_agent FROM audit_events
       WHERE request_id = $1 ORDER BY seq`,
      [requestId],
    );
    return rows;
  }

  beforeAll(async () => {
    server = await startTestServer({
      db: await openTestDatabase(target),
      env: { TRUSTED_PROXIES: proxy },
    });
    await server.createUser("root", password, ["admin"]);
    await server.createUser("vera", password, ["viewer"]);
    state.key = await server.createApiKey(allScopes);
    // Retrieval through the RAG plugin on both databases (the PostgreSQL of the tests has no
    // pgvector for the built-in store); the core's calls to it (as ai-core) are events of the
    // user's request too.
    const core = server.core;
    const system = { kind: "system" as const, id: "" };
    const meta = { requestId: "audit-origin-setup" };
    const { credentials } = await core.plugins.register(
      system,
      meta,
      {
        id: "origin-rag",
        name: "Origin RAG",
        pluginType: "retrieval",
        endpoints: { rag_index: "/rag/index", rag_query: "/rag/query" },
        host: "127.0.0.1",
        port: 1,
        traits: ["compliance:hipaa"],
      },
      false,
    );
    ragDir = mkdtempSync(join(tmpdir(), "traitgate-origin-"));
    rag = await startRagPlugin({
      config: loadRagConfig({
        CORE_SECRET: credentials.coreSecret,
        PORT: "0",
        HOST: "127.0.0.1",
        DATA_DIR: ragDir,
        EMBEDDING_DIM: "64",
      }),
      log: silentLogger,
    });
    await core.plugins.update(
      system,
      meta,
      {
        id: "origin-rag",
        name: "Origin RAG",
        pluginType: "retrieval",
        endpoints: { rag_index: "/rag/index", rag_query: "/rag/query" },
        host: "127.0.0.1",
        port: rag.server.port,
        traits: ["compliance:hipaa"],
      },
      false,
    );
    await core.serviceAccounts.create({ userId: "", kind: "system" }, meta, {
      name: "ai-core",
      description: "",
      roles: ["service"],
    });
    await core.allowlist.put(system, meta, {
      caller: "ai-core",
      target: "origin-rag",
      operations: ["rag_index", "rag_query"],
    });
    await core.settingsAdmin.update(
      { kind: "system", userId: "test", username: "test", apiKeyId: undefined },
      meta,
      { values: { "rag.backend": "plugin", "rag.plugin_id": "origin-rag" } },
    );
    await core.settings.refresh();
  });
  afterAll(async () => {
    await server?.close();
    await rag?.close();
    if (ragDir) rmSync(ragDir, { recursive: true, force: true });
  });

  const cases: Case[] = [
    {
      name: "a login",
      action: "login",
      outcome: "success",
      run: async () => {
        const s = ok(await via("POST", "/auth/login", { username: "root", password }));
        state.admin = s.reply.body.token as string;
        return s;
      },
    },
    {
      name: "a failed login",
      action: "login",
      outcome: "failure",
      run: () => via("POST", "/auth/login", { username: "root", password: "not-the-password" }),
    },
    {
      name: "a refresh token used twice",
      action: "refresh",
      outcome: "denied",
      run: async () => {
        // Its own session: reusing the token ends the session it belongs to.
        const login = ok(await via("POST", "/auth/login", { username: "root", password }));
        const refreshToken = login.reply.body.refresh_token as string;
        ok(await via("POST", "/auth/refresh", { refresh_token: refreshToken }));
        return via("POST", "/auth/refresh", { refresh_token: refreshToken });
      },
    },
    {
      name: "a user's creation",
      action: "user_create",
      outcome: "success",
      run: async () => {
        const s = ok(
          await asAdmin("POST", "/api/admin/users", {
            username: "ulla",
            password: otherPassword,
            roles: ["viewer"],
          }),
        );
        state.user.id = s.reply.body.user_id as string;
        return s;
      },
    },
    {
      name: "a user's update",
      action: "user_update",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin("PATCH", `/api/admin/users/${state.user.id}`, {
            roles: { values: ["viewer", "analyst"] },
          }),
        ),
    },
    {
      name: "a password set by an administrator",
      action: "user_set_password",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin("POST", `/api/admin/users/${state.user.id}/password`, {
            password: password,
          }),
        ),
    },
    {
      name: "the user's login",
      action: "login",
      outcome: "success",
      run: async () => {
        const s = ok(await via("POST", "/auth/login", { username: "ulla", password }));
        state.user.token = s.reply.body.token as string;
        return s;
      },
    },
    {
      name: "a password change with the wrong current password",
      action: "password_change",
      outcome: "failure",
      run: () =>
        via(
          "POST",
          "/auth/password",
          { current_password: "not-the-password", new_password: "never-set-password-1" },
          { token: state.user.token },
        ),
    },
    {
      name: "a password change",
      action: "password_change",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/auth/password",
            { current_password: password, new_password: otherPassword },
            { token: state.user.token },
          ),
        ),
    },
    {
      name: "an MFA enrolment",
      action: "mfa_enroll",
      outcome: "success",
      run: async () => {
        const s = ok(await via("POST", "/auth/mfa/enroll", {}, { token: state.user.token }));
        state.user.secret = s.reply.body.secret as string;
        return s;
      },
    },
    {
      name: "an MFA activation with a wrong code",
      action: "mfa_activate",
      outcome: "failure",
      run: () => via("POST", "/auth/mfa/activate", { code: "000000" }, { token: state.user.token }),
    },
    {
      name: "an MFA activation",
      action: "mfa_activate",
      outcome: "success",
      run: async () => {
        const s = ok(
          await via(
            "POST",
            "/auth/mfa/activate",
            { code: totp(state.user.secret) },
            { token: state.user.token },
          ),
        );
        state.user.recovery = s.reply.body.recovery_codes as string[];
        return s;
      },
    },
    {
      name: "MFA turned off",
      action: "mfa_disable",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/auth/mfa/disable",
            { code: state.user.recovery[0] },
            { token: state.user.token },
          ),
        ),
    },
    {
      name: "an administrator's MFA reset",
      action: "user_mfa_reset",
      outcome: "success",
      run: async () => {
        // Another user with MFA on, set up through the same proxy.
        ok(
          await asAdmin("POST", "/api/admin/users", {
            username: "mona",
            password: otherPassword,
            roles: ["viewer"],
          }),
        );
        const login = ok(
          await via("POST", "/auth/login", { username: "mona", password: otherPassword }),
        );
        const token = login.reply.body.token as string;
        state.mfaUser.id = (
          (
            await server.core.db.query<{ id: string }>(
              "SELECT id FROM users WHERE username = 'mona'",
            )
          ).rows[0] as { id: string }
        ).id;
        const secret = ok(await via("POST", "/auth/mfa/enroll", {}, { token })).reply.body
          .secret as string;
        ok(await via("POST", "/auth/mfa/activate", { code: totp(secret) }, { token }));
        return ok(await asAdmin("POST", `/api/admin/users/${state.mfaUser.id}/mfa:reset`));
      },
    },
    {
      name: "a logout",
      action: "logout",
      outcome: "success",
      run: async () => ok(await via("POST", "/auth/logout", {}, { token: state.user.token })),
    },
    {
      name: "a logout everywhere",
      action: "logout_all",
      outcome: "success",
      run: async () => {
        const login = ok(
          await via("POST", "/auth/login", { username: "ulla", password: otherPassword }),
        );
        return ok(
          await via("POST", "/auth/logout-all", {}, { token: login.reply.body.token as string }),
        );
      },
    },
    {
      name: "a user's deletion",
      action: "user_delete",
      outcome: "success",
      run: async () => ok(await asAdmin("DELETE", `/api/admin/users/${state.user.id}`)),
    },
    {
      name: "a settings update",
      action: "settings_update",
      outcome: "success",
      run: async () => ok(await asAdmin("POST", "/api/admin/settings", { log_level: "debug" })),
    },
    {
      name: "a refused settings update",
      action: "settings_update",
      outcome: "failure",
      run: () => asAdmin("POST", "/api/admin/settings", { no_such_setting: 1 }),
    },
    {
      name: "an API key's creation",
      action: "api_key_create",
      outcome: "success",
      run: async () => {
        const s = ok(
          await asAdmin("POST", "/api/admin/api-keys", {
            name: "origin key",
            scopes: ["audit:read"],
          }),
        );
        state.apiKeyId = (s.reply.body.api_key as { key_id: string }).key_id;
        return s;
      },
    },
    {
      name: "a listing of API keys",
      action: "api_key_list",
      outcome: "success",
      run: async () => ok(await asAdmin("GET", "/api/admin/api-keys")),
    },
    {
      name: "a read of an API key",
      action: "api_key_get",
      outcome: "success",
      run: async () => ok(await asAdmin("GET", `/api/admin/api-keys/${state.apiKeyId}`)),
    },
    {
      name: "an API key's revocation",
      action: "api_key_revoke",
      outcome: "success",
      run: async () => ok(await asAdmin("POST", `/api/admin/api-keys/${state.apiKeyId}:revoke`)),
    },
    {
      name: "a service account's creation",
      action: "service_account_create",
      outcome: "success",
      run: async () => {
        const s = ok(
          await asAdmin("POST", "/api/admin/service-accounts", {
            name: "origin-svc",
            roles: ["service"],
          }),
        );
        state.account.id = (
          s.reply.body.service_account as { service_account_id: string }
        ).service_account_id;
        state.account.secret = s.reply.body.client_secret as string;
        return s;
      },
    },
    {
      name: "a service account's update",
      action: "service_account_update",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin("PATCH", `/api/admin/service-accounts/${state.account.id}`, {
            description: "origin test",
          }),
        ),
    },
    {
      name: "a service account's secret rotation",
      action: "service_account_rotate_secret",
      outcome: "success",
      run: async () => {
        const s = ok(
          await asAdmin("POST", `/api/admin/service-accounts/${state.account.id}:rotate-secret`, {
            grace_seconds: 0,
          }),
        );
        state.account.secret = s.reply.body.client_secret as string;
        return s;
      },
    },
    {
      name: "a service token",
      action: "service_token",
      outcome: "success",
      run: async () => {
        const s = ok(
          await via("POST", "/auth/token", {
            grant_type: "client_credentials",
            client_id: "origin-svc",
            client_secret: state.account.secret,
          }),
        );
        state.account.token = s.reply.body.access_token as string;
        return s;
      },
    },
    {
      name: "a refused service token",
      action: "service_token",
      outcome: "failure",
      run: () =>
        via("POST", "/auth/token", {
          grant_type: "client_credentials",
          client_id: "origin-svc",
          client_secret: "not-the-secret-of-this-account",
        }),
    },
    {
      name: "a plugin's registration",
      action: "plugin_register",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin("POST", "/admin/plugins", {
            id: "origin-plugin",
            name: "Origin",
            plugin_type: "internal",
            endpoints: { ping: "/ping" },
            host: "127.0.0.1",
            port: state.pluginPort,
          }),
        ),
    },
    {
      name: "a plugin's update",
      action: "plugin_update",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin("PUT", "/admin/plugins/origin-plugin", {
            name: "Origin, renamed",
            plugin_type: "internal",
            endpoints: { ping: "/ping" },
            host: "127.0.0.1",
            port: state.pluginPort,
          }),
        ),
    },
    {
      name: "a plugin disabled",
      action: "plugin_disable",
      outcome: "success",
      run: async () => ok(await asAdmin("POST", "/admin/plugins/origin-plugin:disable")),
    },
    {
      name: "a plugin enabled",
      action: "plugin_enable",
      outcome: "success",
      run: async () => ok(await asAdmin("POST", "/admin/plugins/origin-plugin:enable")),
    },
    {
      name: "a plugin's credential rotation",
      action: "plugin_rotate_credentials",
      outcome: "success",
      run: async () => ok(await asAdmin("POST", "/admin/plugins/origin-plugin:rotate-credentials")),
    },
    {
      name: "an allowlist entry",
      action: "allowlist_put",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin("PUT", "/admin/operator/allowlist", {
            caller: "origin-svc",
            target: "origin-plugin",
            operations: ["ping"],
          }),
        ),
    },
    {
      name: "a gateway call (the plugin does not answer)",
      action: "operator_call",
      outcome: "error",
      run: () =>
        via(
          "POST",
          "/gateway/origin-plugin/ping",
          { caller_plugin: "origin-svc", payload: {} },
          { token: state.account.token },
        ),
    },
    {
      name: "a gateway call without a credential",
      action: "operator_call",
      outcome: "denied",
      run: () => via("POST", "/gateway/origin-plugin/ping", { caller_plugin: "origin-svc" }),
    },
    {
      name: "an allowlist entry's removal",
      action: "allowlist_delete",
      outcome: "success",
      run: async () =>
        ok(
          await asAdmin(
            "DELETE",
            "/admin/operator/allowlist?caller=origin-svc&target=origin-plugin",
          ),
        ),
    },
    {
      name: "a plugin's deletion",
      action: "plugin_delete",
      outcome: "success",
      run: async () => ok(await asAdmin("DELETE", "/admin/plugins/origin-plugin")),
    },
    {
      name: "a service account's deletion",
      action: "service_account_delete",
      outcome: "success",
      run: async () =>
        ok(await asAdmin("DELETE", `/api/admin/service-accounts/${state.account.id}`)),
    },
    {
      name: "a trait's registration",
      action: "policy_trait_put",
      outcome: "success",
      run: async () => ok(await asAdmin("PUT", "/api/admin/policy/traits/role:origin_test", {})),
    },
    {
      name: "a trait's removal",
      action: "policy_trait_delete",
      outcome: "success",
      run: async () => ok(await asAdmin("DELETE", "/api/admin/policy/traits/role:origin_test")),
    },
    {
      name: "a refused policy",
      action: "policy_put",
      outcome: "failure",
      run: () =>
        asAdmin("POST", "/api/admin/policy/versions", {
          document: {
            rules: [
              {
                id: "x",
                contexts: ["SEARCH"],
                when: { all: ["role:nobody_here"] },
                decision: "allow",
              },
            ],
          },
        }),
    },
    {
      name: "a new policy version",
      action: "policy_put",
      outcome: "success",
      run: async () => {
        const current = server.core.policy.current();
        state.previousPolicy = current.version;
        const document = structuredClone(current.document) as unknown as {
          rules: { description?: string }[];
        };
        const first = document.rules[0];
        if (first) first.description = `${first.description ?? ""} (origin test)`;
        const s = ok(
          await asAdmin("POST", "/api/admin/policy/versions", {
            document,
            description: "origin test",
          }),
        );
        state.policyVersion = (s.reply.body.version as { version: string }).version;
        return s;
      },
    },
    {
      name: "a policy activation",
      action: "policy_activate",
      outcome: "success",
      run: async () =>
        ok(await asAdmin("POST", `/api/admin/policy/versions/${state.policyVersion}:activate`)),
    },
    {
      name: "a policy decision",
      action: "policy_decision",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/api/policy/evaluate",
            { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] },
            { token: state.admin },
          ),
        ),
    },
    {
      name: "a batch of policy decisions",
      action: "policy_decision_batch",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/api/policy/evaluate-batch",
            {
              requests: [
                { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] },
              ],
            },
            { token: state.admin },
          ),
        ),
    },
    {
      name: "an explained decision",
      action: "policy_decision",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/api/policy/explain",
            { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] },
            { token: state.admin, key: state.key },
          ),
        ),
    },
    {
      name: "a sanitized document",
      action: "policy_decision",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/api/policy/sanitize",
            {
              traits: ["role:viewer"],
              context: "SEARCH",
              classifications: ["public"],
              document: { note: "nothing to remove" },
            },
            { token: state.admin },
          ),
        ),
    },
    {
      name: "an ingestion",
      action: "rag_ingest",
      outcome: "success",
      also: ["operator_call"],
      run: async () =>
        ok(
          await via(
            "POST",
            "/api/rag/ingest",
            {
              documents: [
                {
                  path: "origin/hours.md",
                  content: "The clinic opens at eight and closes at six.",
                  required_traits: [],
                  classification: "public",
                },
              ],
            },
            { token: state.admin },
          ),
        ),
    },
    {
      name: "an ingestion refused for an access change",
      action: "rag_ingest",
      outcome: "denied",
      run: () =>
        via(
          "POST",
          "/api/rag/ingest",
          {
            documents: [
              {
                path: "origin/hours.md",
                content: "The clinic opens at eight and closes at six.",
                required_traits: ["role:clinician"],
                classification: "internal",
              },
            ],
          },
          { token: state.admin },
        ),
    },
    {
      name: "an access change",
      action: "rag_access_change",
      outcome: "success",
      run: async () =>
        ok(
          await via(
            "POST",
            "/api/rag/ingest",
            {
              documents: [
                {
                  path: "origin/hours.md",
                  content: "The clinic opens at eight and closes at six.",
                  required_traits: ["role:clinician"],
                  classification: "internal",
                },
              ],
              allow_access_change: true,
            },
            { token: state.admin },
          ),
        ),
    },
    {
      name: "a search",
      action: "search",
      outcome: "success",
      also: ["operator_call"],
      run: async () =>
        ok(
          await via("POST", "/api/search", { q: "clinic hours", top_k: 3 }, { token: state.admin }),
        ),
    },
    {
      name: "an administrative call without a token",
      action: "access_denied",
      outcome: "denied",
      run: () => via("GET", "/api/admin/settings", undefined, { key: state.key }),
    },
    {
      name: "an administrative call by a user without the role",
      action: "access_denied",
      outcome: "denied",
      run: async () => {
        const login = ok(await via("POST", "/auth/login", { username: "vera", password }));
        return via("GET", "/api/admin/settings", undefined, {
          token: login.reply.body.token as string,
          key: state.key,
        });
      },
    },
  ];

  /** The requests each case sent, for the checks after the table. */
  const done = new Map<string, Sent>();

  it.each(cases)("$name: $action ($outcome) records the client and its User-Agent", async (c) => {
    const s = await c.run();
    done.set(c.name, s);
    // Some events are written after the answer (operator_call): wait for them, bounded.
    let rows = await eventsOf(s.id);
    const expected = [c.action, ...(c.also ?? [])];
    const complete = () => expected.every((a) => rows.some((r) => r.action === a));
    for (let i = 0; i < 200 && !complete(); i++) {
      await new Promise((r) => setTimeout(r, 10));
      rows = await eventsOf(s.id);
    }
    expect(
      rows.filter((r) => r.action === c.action).map((r) => r.outcome),
      `${c.name}: ${JSON.stringify(s.reply.body)}`,
    ).toContain(c.outcome);
    for (const action of c.also ?? []) expect(rows.map((r) => r.action)).toContain(action);
    for (const row of rows) {
      expect({
        action: row.action,
        client_address: row.client_address,
        user_agent: row.user_agent,
      }).toEqual({ action: row.action, client_address: client, user_agent: s.agent });
    }
  });

  it("leaves no event of these requests without its origin", async () => {
    const { rows } = await server.core.db.query<{ action: string; n: number }>(
      `SELECT action, count(*)::int AS n FROM audit_events
       WHERE request_id LIKE 'origin-%' AND (client_address IS DISTINCT FROM $1
         OR user_agent NOT LIKE 'origin-test/1.0 (%')
       GROUP BY action`,
      [client],
    );
    expect(rows).toEqual([]);
  });

  it("records the origin of a login over Connect and over gRPC too", async () => {
    const connect = await sendJson(
      server.url,
      "/traitgate.identity.v1.IdentityService/Login",
      { username: "root", password },
      {
        from: proxy,
        headers: {
          "x-forwarded-for": client,
          "user-agent": "origin-test/connect",
          "x-request-id": "origin-connect",
        },
      },
    );
    expect(connect.status).toBe(200);
    const grpc = await sendGrpc(
      server.url,
      "/traitgate.identity.v1.IdentityService/Login",
      toBinary(LoginRequestSchema, create(LoginRequestSchema, { username: "root", password })),
      {
        from: proxy,
        headers: {
          "x-forwarded-for": client,
          "user-agent": "origin-test/grpc",
          "x-request-id": "origin-grpc",
        },
      },
    );
    expect(grpc).toBe("0");
    for (const [id, agent] of [
      ["origin-connect", "origin-test/connect"],
      ["origin-grpc", "origin-test/grpc"],
    ] as const) {
      expect(await eventsOf(id)).toEqual([
        { action: "login", outcome: "success", client_address: client, user_agent: agent },
      ]);
    }
  });

  it("answers the origin in the audit API and in the export", async () => {
    const s = done.get("a settings update");
    expect(s).toBeDefined();
    const listed = ok(
      await asAdmin("GET", "/api/admin/audit?action=settings_update&outcome=success"),
    );
    const event = (listed.reply.body.events as Record<string, unknown>[]).find(
      (e) => e.request_id === s?.id,
    );
    expect(event).toMatchObject({ client_address: client, user_agent: s?.agent });
    const rows = await readAuditEvents(server.core.db, {
      filter: { action: "settings_update", outcome: "success" },
      order: "oldest",
      limit: 1000,
    });
    const line = rows.map((r) => JSON.parse(exportLine(r))).find((l) => l.request_id === s?.id);
    expect(line).toMatchObject({ client_address: client, user_agent: s?.agent });
  });
});
