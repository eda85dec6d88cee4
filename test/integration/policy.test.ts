import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { PolicyService } from "../../gen/traitgate/policy/v1/policy_pb.js";
import { readAuditEvents } from "../../src/audit/index.js";
import { defaultPolicy, type PolicyDocument } from "../../src/policy/index.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The policy service as wired into the real core (src/platform.ts), on PGlite: the shipped
 * policy's case table over REST and gRPC, explain data, audit of every decision, fail
 * closed when the audit log is down, administration (validation refusals keep the active
 * version answering), and the Sanitize fixture. Acceptance of issue 5 (service slice).
 */

interface Case {
  name: string;
  request: { traits: string[]; context: string; classifications?: string[]; resource?: object };
  want: { decision?: string; deciding_rule?: string; reason_code?: string; error?: string };
}
const casesDir = join(import.meta.dirname, "../policy/cases");
const cases = JSON.parse(readFileSync(join(casesDir, "default-policy.json"), "utf8")) as Case[];
const fixture = JSON.parse(readFileSync(join(casesDir, "sanitize-fixture.json"), "utf8")) as {
  request: Case["request"];
  document: Record<string, unknown>;
  want: { decision: string; classifications: string[]; document: unknown; removed: string[] };
};

const password = "policy-test-password";
let server: TestServer;
let adminToken = "";
let viewerToken = "";
let auditorToken = "";
let viewerId = "";
let writeKey = "";
let readKey = "";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies are checked by shape
type Json = any;

interface Reply {
  status: number;
  body: Record<string, Json>;
  reason: string | undefined;
  metadata: Record<string, string>;
}

async function login(username: string): Promise<string> {
  const res = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { token: string }).token;
}

async function call(
  method: string,
  path: string,
  options: { token?: string; key?: string; body?: unknown } = {},
): Promise<Reply> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...(options.key ? { "x-api-key": options.key } : {}),
    },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  const body = (await res.json()) as Record<string, Json>;
  const info = (body.details as { reason?: string; metadata?: Record<string, string> }[])?.[0];
  return { status: res.status, body, reason: info?.reason, metadata: info?.metadata ?? {} };
}

const evaluate = (body: unknown, token = adminToken, path = "/api/policy/evaluate") =>
  call("POST", path, { token, body });
const admin = (method: string, path: string, body?: unknown, key = writeKey) =>
  call(method, path, { token: adminToken, key, body });

async function decisionEvents(): Promise<Record<string, Json>[]> {
  // Through the audit log's reader: compact records resolved to the full form.
  const events = await readAuditEvents(server.core.db, {
    filter: { action: "policy_decision" },
    order: "oldest",
    limit: 1000,
  });
  return events.map((e) => e.details as Record<string, Json>);
}

beforeAll(async () => {
  server = await startTestServer({ env: { LOG_LEVEL: "info" } });
  await server.createUser("root", password, ["admin"]);
  viewerId = await server.createUser("vera", password, ["viewer"]);
  await server.createUser("otto", password, ["auditor"]);
  adminToken = await login("root");
  viewerToken = await login("vera");
  auditorToken = await login("otto");
  writeKey = await server.createApiKey(["policy:read", "policy:write"]);
  readKey = await server.createApiKey(["policy:read"]);
});
afterAll(async () => {
  await server?.close();
});

describe("the shipped policy's case table", () => {
  it("is the active version from the first start", async () => {
    const engine = server.core.policy.current();
    expect(engine.document).toEqual(defaultPolicy);
    expect(cases.length).toBeGreaterThanOrEqual(60);
  });

  it.each(cases.map((c) => [c.name, c] as const))("REST: %s", async (_name, c) => {
    const reply = await evaluate(c.request);
    if (c.want.error !== undefined) {
      expect(reply.status).toBe(400);
      expect(reply.reason).toBe(c.want.error);
      expect(reply.body.decision).toBeUndefined();
      return;
    }
    expect(reply.status).toBe(200);
    expect(reply.body.decision).toBe(c.want.decision);
    if (c.want.deciding_rule) expect(reply.body.deciding_rule).toBe(c.want.deciding_rule);
    if (c.want.reason_code) expect(reply.body.reason_code).toBe(c.want.reason_code);
    expect(reply.body.decision_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(reply.body.policy_version).toBe(server.core.policy.current().version);
  });

  it("answers the same over gRPC, case by case", async () => {
    const client = createClient(PolicyService, createGrpcTransport({ baseUrl: server.url }));
    const headers = { authorization: `Bearer ${adminToken}` };
    for (const c of cases) {
      const request = {
        traits: c.request.traits,
        context: c.request.context,
        classifications: c.request.classifications ?? [],
        ...(c.request.resource ? { resource: c.request.resource as never } : {}),
      };
      if (c.want.error !== undefined) {
        const err = await client.evaluate(request, { headers }).then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
        expect(err?.code, c.name).toBe(Code.InvalidArgument);
        expect(err?.findDetails(ErrorInfoSchema)[0]?.reason, c.name).toBe(c.want.error);
        continue;
      }
      const got = await client.evaluate(request, { headers });
      expect(got.decision, c.name).toBe(c.want.decision);
      if (c.want.deciding_rule) expect(got.decidingRule, c.name).toBe(c.want.deciding_rule);
      if (c.want.reason_code) expect(got.reasonCode, c.name).toBe(c.want.reason_code);
      expect(got.decisionId, c.name).not.toBe("");
    }
  });

  it("answers a batch over gRPC as it answers each request", async () => {
    const client = createClient(PolicyService, createGrpcTransport({ baseUrl: server.url }));
    const headers = { authorization: `Bearer ${adminToken}` };
    const asked = cases.filter((c) => c.want.error === undefined);
    const requests = asked.map((c) => ({
      traits: c.request.traits,
      context: c.request.context,
      classifications: c.request.classifications ?? [],
      ...(c.request.resource ? { resource: c.request.resource as never } : {}),
    }));
    // Twice: the second batch is written from what the first one kept.
    for (let pass = 0; pass < 2; pass++) {
      const batch = await client.evaluateBatch({ requests }, { headers });
      expect(batch.decisions).toHaveLength(requests.length);
      for (const [k, request] of requests.entries()) {
        const one = await client.evaluate(request, { headers });
        const got = batch.decisions[k]!;
        expect({ ...got, decisionId: "" }, asked[k]?.name).toEqual({ ...one, decisionId: "" });
        expect(got.decisionId).toMatch(/^[0-9a-f-]{36}$/);
      }
      expect(new Set(batch.decisions.map((d) => d.decisionId)).size).toBe(requests.length);
    }
  });

  it("answers on the alias path /policy/evaluate too", async () => {
    const reply = await evaluate(
      { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] },
      adminToken,
      "/policy/evaluate",
    );
    expect(reply.status).toBe(200);
    expect(reply.body).toMatchObject({ decision: "allow", deciding_rule: "data-public" });
  });
});

describe("Evaluate", () => {
  it("carries the derivation of the implied traits its rules used", async () => {
    const reply = await evaluate({
      traits: ["role:nurse"],
      context: "USER_ACTION",
      classifications: ["internal"],
    });
    expect(reply.body.decision).toBe("allow");
    expect(reply.body.implied_traits).toEqual([
      { trait: "role:viewer", via: ["role:nurse", "role:clinician", "role:viewer"] },
    ]);
  });

  it("denies with the reason when a CEL condition fails at run time", async () => {
    const reply = await evaluate({
      traits: ["role:analyst", "capability:export"],
      context: "DATA_EXPORT",
      classifications: ["internal"],
    });
    expect(reply.status).toBe(200);
    expect(reply.body.decision).toBe("deny");
    expect(reply.body.reason_code).toBe("EVALUATION_ERROR");
    expect(reply.body.errors[0].rule_id).toBe("export-row-limit");
    expect(reply.body.reason).toContain("export-row-limit");
  });

  it("names the trait of a 400", async () => {
    const reply = await evaluate({ traits: ["role:viewer", "team:red"], context: "SEARCH" });
    expect(reply.status).toBe(400);
    expect(reply.reason).toBe("TRAIT_UNKNOWN_CATEGORY");
    expect(reply.metadata).toMatchObject({ trait: "team:red", field: "traits[1]" });
  });

  it("lets a user decide about themselves only, and admins and services about anyone", async () => {
    const body = { traits: ["role:viewer"], context: "SEARCH", classifications: ["public"] };
    const other = await evaluate({ ...body, user_id: "someone-else" }, viewerToken);
    expect(other.status).toBe(403);
    expect(other.reason).toBe("USER_MISMATCH");
    const own = await evaluate({ ...body, user_id: viewerId }, viewerToken);
    expect(own.status).toBe(200);
    const implicit = await evaluate(body, viewerToken);
    expect(implicit.status).toBe(200);
    expect((await evaluate({ ...body, user_id: "someone-else" })).status).toBe(200);
    const events = await decisionEvents();
    expect(events.at(-2)?.user_id).toBe(viewerId);
    expect(events.at(-1)?.user_id).toBe("someone-else");
  });

  it("needs a token", async () => {
    const reply = await evaluate({ traits: [], context: "SEARCH" }, "");
    expect(reply.status).toBe(401);
  });

  it("writes N audit events for N decisions, with the decision ids answered", async () => {
    const before = (await decisionEvents()).length;
    const requests = Array.from({ length: 12 }, (_, i) => ({
      traits: i % 2 ? ["role:analyst"] : ["role:viewer"],
      context: "USER_ACTION",
      classifications: [i % 3 ? "pii" : "public"],
      resource: { owner: "x", note: "never recorded" },
    }));
    const single = await Promise.all(requests.map((r) => evaluate(r)));
    const batch = await call("POST", "/api/policy/evaluate-batch", {
      token: adminToken,
      body: { requests },
    });
    expect(batch.status).toBe(200);
    const answered = [
      ...single.map((r) => r.body),
      ...(batch.body.decisions as Record<string, Json>[]),
    ];
    const events = (await decisionEvents()).slice(before);
    expect(events).toHaveLength(12);
    // The batch is one event holding its 12 decisions, each with its id.
    const rows = await readAuditEvents(server.core.db, {
      filter: { action: "policy_decision_batch" },
      order: "newest",
      limit: 1,
    });
    const inBatch = rows[0]?.details.decisions as Record<string, Json>[];
    expect(inBatch).toHaveLength(12);
    const byId = new Map([...events, ...inBatch].map((e) => [e.decision_id, e]));
    expect(byId.size).toBe(24);
    const version = server.core.policy.current().version;
    expect(events.every((e) => e.policy_version === version)).toBe(true);
    expect(rows[0]?.details.policy_version).toBe(version);
    for (const a of answered) {
      const e = byId.get(a.decision_id);
      expect(e).toMatchObject({
        decision: a.decision,
        reason_code: a.reason_code,
        matched_rules: a.matched_rules,
        context: "USER_ACTION",
      });
      expect(e?.traits).toEqual(expect.arrayContaining([expect.stringMatching(/^role:/)]));
      expect(e?.resource_attributes).toEqual(["owner", "note"]);
      expect(JSON.stringify(e)).not.toContain("never recorded");
    }
  });
});

describe("Explain, ListUiFeatures, Sanitize", () => {
  it("explains every rule and the derivation of implied traits", async () => {
    const reply = await call("POST", "/api/policy/explain", {
      token: adminToken,
      key: readKey,
      body: { traits: ["role:admin"], context: "USER_ACTION", classifications: ["internal"] },
    });
    expect(reply.status).toBe(200);
    expect(reply.body.decision.decision).toBe("allow");
    expect(reply.body.rules).toHaveLength(defaultPolicy.rules.length);
    const viewer = reply.body.implied_traits.find(
      (t: { trait: string }) => t.trait === "role:viewer",
    );
    expect(viewer.via[0]).toBe("role:admin");
    expect(viewer.via.at(-1)).toBe("role:viewer");
  });

  it("keeps Explain (the whole policy's reasoning) from callers who may not read the policy", async () => {
    const body = { traits: ["role:viewer"], context: "USER_ACTION", classifications: ["internal"] };
    const viewer = await call("POST", "/api/policy/explain", {
      token: viewerToken,
      key: readKey,
      body,
    });
    expect([viewer.status, viewer.reason]).toEqual([403, "ROLE"]);
    // Like the policy's other reads, it takes an API key with policy:read as well.
    const noKey = await call("POST", "/api/policy/explain", { token: adminToken, body });
    expect([noKey.status, noKey.reason]).toEqual([401, "API_KEY_MISSING"]);
  });

  it("lists the UI features of a role", async () => {
    const reply = await call("POST", "/api/policy/ui-features", {
      token: viewerToken,
      body: { traits: ["role:viewer"] },
    });
    expect(reply.body.features).toEqual(["ui_feature:dashboard", "ui_feature:search"]);
  });

  it("removes every classified field and pattern of the fixture and nothing else", async () => {
    const reply = await call("POST", "/api/policy/sanitize", {
      token: adminToken,
      body: { ...fixture.request, document: fixture.document },
    });
    expect(reply.status).toBe(200);
    expect(reply.body.decision.decision).toBe(fixture.want.decision);
    expect([...reply.body.decision.sanitize.classifications].sort()).toEqual(
      fixture.want.classifications,
    );
    expect(reply.body.document).toEqual(fixture.want.document);
    const removed = (reply.body.removed as Record<string, string>[])
      .map((r) => `${r.path} ${r.kind} ${r.action} ${r.classification || r.pattern}`)
      .sort();
    expect(removed).toEqual(fixture.want.removed);
    const last = (await decisionEvents()).at(-1);
    expect(last?.decision_id).toBe(reply.body.decision.decision_id);
    expect(last?.via).toBe("sanitize");
    expect(JSON.stringify(last)).not.toContain("Lovelace");
  });

  it('leaves out what does not apply instead of answering "" or 0', async () => {
    const reply = await call("POST", "/api/policy/sanitize", {
      token: adminToken,
      body: { ...fixture.request, document: fixture.document },
    });
    const removed = reply.body.removed as Record<string, unknown>[];
    const fields = removed.filter((r) => r.kind === "field");
    const patterns = removed.filter((r) => r.kind === "pattern");
    expect(fields.length).toBeGreaterThan(0);
    expect(patterns.length).toBeGreaterThan(0);
    for (const r of fields) {
      expect(Object.keys(r).sort()).toEqual(["action", "classification", "kind", "path"]);
    }
    for (const r of patterns) {
      expect(r).toMatchObject({ pattern: expect.any(String), count: expect.any(Number) });
      expect(r.count).toBeGreaterThan(0);
    }
    // A deny no rule decided names no deciding rule; rules without a condition trace none.
    const request = { traits: ["role:viewer"], context: "NO_SUCH_CONTEXT" };
    const denied = await call("POST", "/api/policy/evaluate", { token: adminToken, body: request });
    expect(denied.body.reason_code).toBe("NO_MATCH");
    expect(denied.body).not.toHaveProperty("deciding_rule");
    const explained = await call("POST", "/api/policy/explain", {
      token: adminToken,
      key: readKey,
      body: { traits: ["role:admin"], context: "USER_ACTION", classifications: ["internal"] },
    });
    expect(explained.status).toBe(200);
    const rules = explained.body.rules as Record<string, unknown>[];
    expect(rules.filter((r) => !("condition" in r)).length).toBeGreaterThan(0);
    for (const rule of rules) expect(rule.condition, String(rule.id)).not.toBe("");
  });

  it("answers no document on deny", async () => {
    const reply = await call("POST", "/api/policy/sanitize", {
      token: adminToken,
      body: {
        traits: ["role:viewer"],
        context: "USER_ACTION",
        classifications: ["phi"],
        document: { ssn: "123-45-6789" },
      },
    });
    expect(reply.body.decision.decision).toBe("deny");
    expect(reply.body.document).toBeUndefined();
    expect(reply.body.removed).toEqual([]);
  });
});

describe("administration", () => {
  const ghostPolicy = (trait: string): PolicyDocument => ({
    rules: [
      {
        id: "ghosts-see-public",
        description: "test policy",
        contexts: ["SEARCH"],
        when: { all: [trait, "data_access:public"] },
        decision: "allow",
      },
    ],
  });

  it("needs an API key, the role and the scope", async () => {
    const noKey = await call("GET", "/api/admin/policy/traits", { token: adminToken });
    expect(noKey.status).toBe(401);
    expect(noKey.reason).toBe("API_KEY_MISSING");
    const auditorRead = await call("GET", "/api/admin/policy/versions", {
      token: auditorToken,
      key: readKey,
    });
    expect(auditorRead.status).toBe(200);
    expect(auditorRead.body.active_version).toBe(server.core.policy.current().version);
    const auditorWrite = await call("PUT", "/api/admin/policy/traits/role:ghost", {
      token: auditorToken,
      key: writeKey,
      body: {},
    });
    expect(auditorWrite.status).toBe(403);
    expect(auditorWrite.reason).toBe("ROLE");
    const readOnlyKey = await admin("PUT", "/api/admin/policy/traits/role:ghost", {}, readKey);
    expect(readOnlyKey.status).toBe(403);
    expect(readOnlyKey.reason).toBe("API_KEY_SCOPE");
  });

  it("refuses a policy naming an unregistered trait, naming it; the active version answers", async () => {
    const active = server.core.policy.current().version;
    const reply = await admin("POST", "/api/admin/policy/versions", {
      document: ghostPolicy("role:ghost"),
      activate: true,
    });
    expect(reply.status).toBe(400);
    expect(reply.reason).toBe("TRAIT_UNREGISTERED");
    expect(reply.metadata.trait).toBe("role:ghost");
    expect(server.core.policy.current().version).toBe(active);
    const still = await evaluate({
      traits: ["role:viewer"],
      context: "SEARCH",
      classifications: ["public"],
    });
    expect(still.body.policy_version).toBe(active);
  });

  it("refuses a registry change with a cycle, naming it; the active version answers", async () => {
    const active = server.core.policy.current().version;
    expect((await admin("PUT", "/api/admin/policy/traits/role:ring_a", {})).status).toBe(200);
    expect(
      (await admin("PUT", "/api/admin/policy/traits/role:ring_b", { implies: ["role:ring_a"] }))
        .status,
    ).toBe(200);
    const cycle = await admin("PUT", "/api/admin/policy/traits/role:ring_a", {
      implies: ["role:ring_b"],
    });
    expect(cycle.status).toBe(400);
    expect(cycle.reason).toBe("TRAIT_CYCLE");
    expect(cycle.metadata.cycle).toMatch(
      /^(role:ring_a -> role:ring_b -> role:ring_a|role:ring_b -> role:ring_a -> role:ring_b)$/,
    );
    const ringA = await admin("GET", "/api/admin/policy/traits/role:ring_a", undefined, readKey);
    expect(ringA.body.trait.implies).toEqual([]);
    expect(server.core.policy.current().version).toBe(active);
    const builtin = await admin("PUT", "/api/admin/policy/traits/role:admin", {});
    expect(builtin.reason).toBe("TRAIT_BUILTIN");
  });

  it("stores, validates (dry-run with shadow decisions), activates and rolls back versions", async () => {
    const original = server.core.policy.current().version;
    expect(
      (await admin("PUT", "/api/admin/policy/traits/role:ghost", { implies: ["role:viewer"] }))
        .status,
    ).toBe(200);
    const dry = await admin(
      "POST",
      "/api/admin/policy/validate",
      {
        document: ghostPolicy("role:ghost"),
        requests: [
          { traits: ["role:ghost"], context: "SEARCH", classifications: ["public"] },
          { traits: ["role:viewer"], context: "SEARCH", classifications: ["internal"] },
        ],
      },
      readKey,
    );
    expect(dry.status).toBe(200);
    expect(dry.body).toMatchObject({ valid: true, compared: 2 });
    expect(dry.body.changes).toEqual([
      expect.objectContaining({ index: 1, active_decision: "allow", candidate_decision: "deny" }),
    ]);
    const put = await admin("POST", "/api/admin/policy/versions", {
      document: ghostPolicy("role:ghost"),
      description: "ghosts only",
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ created: true, activated: false });
    const version = put.body.version.version as string;
    expect(server.core.policy.current().version).toBe(original);
    const activated = await admin("POST", `/api/admin/policy/versions/${version}:activate`, {});
    expect(activated.status).toBe(200);
    expect(activated.body).toEqual({ version, previous_version: original });
    expect(server.core.policy.current().version).toBe(version);
    const now = await evaluate({
      traits: ["role:ghost"],
      context: "SEARCH",
      classifications: ["public"],
    });
    expect(now.body).toMatchObject({
      decision: "allow",
      deciding_rule: "ghosts-see-public",
      policy_version: version,
    });
    const back = await admin("POST", `/api/admin/policy/versions/${original}:activate`, {});
    expect(back.status).toBe(200);
    const history = await admin("GET", "/api/admin/policy/history", undefined, readKey);
    expect(history.body.activations.slice(0, 2).map((a: { version: string }) => a.version)).toEqual(
      [original, version],
    );
    const { rows } = await server.core.db.query<{ details: Record<string, unknown> }>(
      "SELECT details FROM audit_events WHERE action = 'policy_activate' AND outcome = 'success' ORDER BY seq DESC LIMIT 1",
    );
    expect(rows[0]?.details).toMatchObject({ before: version, after: original });
  });

  it("keeps the previous engine answering when an activation fails validation", async () => {
    const original = server.core.policy.current().version;
    await admin("PUT", "/api/admin/policy/traits/role:phantom", {});
    const put = await admin("POST", "/api/admin/policy/versions", {
      document: ghostPolicy("role:phantom"),
    });
    const version = put.body.version.version as string;
    // The stored version names role:phantom; deleting the trait leaves it invalid.
    expect((await admin("DELETE", "/api/admin/policy/traits/role:phantom")).status).toBe(200);
    const refused = await admin("POST", `/api/admin/policy/versions/${version}:activate`, {});
    expect(refused.status).toBe(400);
    expect(refused.reason).toBe("TRAIT_UNREGISTERED");
    expect(refused.metadata.trait).toBe("role:phantom");
    expect(server.core.policy.current().version).toBe(original);
    const still = await evaluate({
      traits: ["role:viewer"],
      context: "SEARCH",
      classifications: ["public"],
    });
    expect(still.body).toMatchObject({ decision: "allow", policy_version: original });
  });

  it("refuses to delete a trait the active policy or another trait names", async () => {
    await admin("PUT", "/api/admin/policy/traits/role:base", {});
    await admin("PUT", "/api/admin/policy/traits/role:derived", { implies: ["role:base"] });
    const inUse = await admin("DELETE", "/api/admin/policy/traits/role:base");
    expect(inUse.status).toBe(400);
    expect(inUse.reason).toBe("TRAIT_IN_USE");
  });
});

describe("with the audit log failing", () => {
  it("applies no administrative change whose audit event cannot be written", async () => {
    const active = server.core.policy.current().version;
    const document: PolicyDocument = {
      rules: [
        {
          id: "unaudited-rule",
          description: "never stored",
          contexts: ["SEARCH"],
          when: { all: ["role:viewer", "data_access:public"] },
          decision: "allow",
        },
      ],
    };
    await server.core.db.exec("ALTER TABLE audit_events RENAME TO audit_events_away");
    try {
      const trait = await admin("PUT", "/api/admin/policy/traits/role:unaudited", {
        implies: ["role:viewer"],
      });
      expect([trait.status, trait.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      const put = await admin("POST", "/api/admin/policy/versions", {
        document,
        description: "unaudited",
        activate: true,
      });
      expect([put.status, put.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
      // Activating a stored version, and deleting a registered trait, roll back too.
      const { rows: others } = await server.core.db.query<{ version: string }>(
        "SELECT version FROM policy_versions WHERE version <> $1 LIMIT 1",
        [active],
      );
      const other = others[0]?.version;
      expect(other).toBeDefined();
      const activate = await admin("POST", `/api/admin/policy/versions/${other}:activate`, {});
      expect([activate.status, activate.reason]).toEqual([503, "AUDIT_UNAVAILABLE"]);
    } finally {
      await server.core.db.exec("ALTER TABLE audit_events_away RENAME TO audit_events");
    }
    // Neither the trait nor the version was stored, and the active version still answers.
    expect(
      (await admin("GET", "/api/admin/policy/traits/role:unaudited", undefined, readKey)).status,
    ).toBe(404);
    const { rows } = await server.core.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM policy_versions WHERE description = 'unaudited'",
    );
    expect(rows[0]?.n).toBe(0);
    expect(server.core.policy.current().version).toBe(active);
    const { rows: state } = await server.core.db.query<{ active_version: string }>(
      "SELECT active_version FROM policy_state",
    );
    expect(state[0]?.active_version).toBe(active);
  });

  it("answers 503 and no decision", async () => {
    await server.core.db.exec("ALTER TABLE audit_events RENAME TO audit_events_away");
    try {
      const reply = await evaluate({
        traits: ["role:viewer"],
        context: "SEARCH",
        classifications: ["public"],
      });
      expect(reply.status).toBe(503);
      expect(reply.reason).toBe("AUDIT_UNAVAILABLE");
      expect(reply.body.decision).toBeUndefined();
      expect(reply.body.decision_id).toBeUndefined();
      const batch = await call("POST", "/api/policy/evaluate-batch", {
        token: adminToken,
        body: { requests: [{ traits: ["role:viewer"], context: "SEARCH" }] },
      });
      expect(batch.status).toBe(503);
      expect(batch.body.decisions).toBeUndefined();
    } finally {
      await server.core.db.exec("ALTER TABLE audit_events_away RENAME TO audit_events");
    }
    const after = await evaluate({
      traits: ["role:viewer"],
      context: "SEARCH",
      classifications: ["public"],
    });
    expect(after.status).toBe(200);
  });
});
