import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postgresUrlFor, twoHandlesOnOneSchema } from "../support/database.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * Two servers, each with its own pool and listening connection, on one PostgreSQL: a policy
 * version activated through one answers on the other within a second, by LISTEN/NOTIFY (the
 * generation poll is set to a minute here, so it cannot be what delivers it); a registry
 * change travels the same way.
 */

const url = postgresUrlFor("policy-two-servers");
const password = "policy-shared-password";

describe.skipIf(!url)("policy on two servers sharing one PostgreSQL", () => {
  let a: TestServer;
  let b: TestServer;
  let headers: Record<string, string> = {};

  beforeAll(async () => {
    const [dbA, dbB] = await twoHandlesOnOneSchema(url ?? "");
    const env = { LOG_LEVEL: "info" };
    // Both start on an empty policy state: one of them activates the shipped policy.
    [a, b] = await Promise.all([
      startTestServer({ db: dbA, env, policyPollIntervalMs: 60_000 }),
      startTestServer({ db: dbB, env, policyPollIntervalMs: 60_000 }),
    ]);
    await a.createUser("root", password, ["admin"]);
    const key = await a.createApiKey(["policy:read", "policy:write"]);
    const res = await fetch(`${a.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "root", password }),
    });
    const { token } = (await res.json()) as { token: string };
    headers = {
      authorization: `Bearer ${token}`,
      "x-api-key": key,
      "content-type": "application/json",
    };
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it("deletes a trait once when deletions race on both servers: one succeeds, the others 404", async () => {
    const call = (server: TestServer, method: string) =>
      fetch(`${server.url}/api/admin/policy/traits/role:racy`, {
        method,
        headers,
        ...(method === "PUT" ? { body: "{}" } : {}),
      });
    for (let round = 0; round < 5; round++) {
      expect((await call(a, "PUT")).status).toBe(200);
      const answers = await Promise.all([a, b, a, b].map((server) => call(server, "DELETE")));
      expect(answers.map((r) => r.status).sort()).toEqual([200, 404, 404, 404]);
    }
    const { rows } = await a.core.db.query<{ n: string }>(
      `SELECT count(*) AS n FROM audit_events
        WHERE action = 'policy_trait_delete' AND target = 'trait:role:racy' AND outcome = 'success'`,
    );
    expect(Number(rows[0]?.n)).toBe(5);
  });

  it("activated the shipped policy once for both", async () => {
    expect(a.core.policy.current().version).toBe(b.core.policy.current().version);
    const { rows } = await a.core.db.query<{ n: string }>(
      "SELECT count(*) AS n FROM policy_activations",
    );
    expect(Number(rows[0]?.n)).toBe(1);
  });

  it("answers with a version activated on A on B within one second", async () => {
    const original = b.core.policy.current().version;
    const document = {
      rules: [
        {
          id: "viewers-only",
          description: "two-server test",
          contexts: ["SEARCH"],
          when: { all: ["role:viewer"] },
          decision: "allow",
        },
      ],
    };
    const put = await fetch(`${a.url}/api/admin/policy/versions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ document, activate: true }),
    });
    expect(put.status).toBe(200);
    const { version } = ((await put.json()) as { version: { version: string } }).version;
    expect(version).not.toBe(original);
    expect(a.core.policy.current().version).toBe(version);
    const waited = await until(() => b.core.policy.current().version === version, 1_000);
    expect(waited).toBeLessThan(1_000);
    const onB = await fetch(`${b.url}/api/policy/evaluate`, {
      method: "POST",
      headers,
      body: JSON.stringify({ traits: ["role:admin"], context: "SEARCH" }),
    });
    expect(await onB.json()).toMatchObject({
      decision: "allow",
      deciding_rule: "viewers-only",
      policy_version: version,
    });
  });

  it("applies a trait registered on A on B within one second", async () => {
    const res = await fetch(`${a.url}/api/admin/policy/traits/role:intern`, {
      method: "PUT",
      headers,
      body: JSON.stringify({ implies: ["role:viewer"] }),
    });
    expect(res.status).toBe(200);
    await until(() => b.core.policy.current().registry.idOf("role:intern") !== undefined, 1_000);
    const onB = await fetch(`${b.url}/api/policy/evaluate`, {
      method: "POST",
      headers,
      body: JSON.stringify({ traits: ["role:intern"], context: "SEARCH" }),
    });
    expect(await onB.json()).toMatchObject({
      decision: "allow",
      implied_traits: [{ trait: "role:viewer", via: ["role:intern", "role:viewer"] }],
    });
  });
});
