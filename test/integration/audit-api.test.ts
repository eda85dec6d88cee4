import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";

/** GET /api/admin/audit (AuditService) through the real core, over REST and gRPC. */

const password = "audit-api-test-password";
let server: TestServer;
let h2: Http2SessionManager;
let root = "";
let auditor = "";
let viewer = "";
let veraId = "";
/** audit:read */
let auditKey = "";
/** api_keys:read only: no audit:read. */
let otherKey = "";

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("root", password, ["admin"]);
  await server.createUser("audrey", password, ["auditor"]);
  veraId = await server.createUser("vera", password, ["viewer"]);
  root = await login("root");
  auditor = await login("audrey");
  viewer = await login("vera");
  // Two failed logins of vera's, to find by action, actor and outcome.
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${server.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "vera", password: "wrong-password-here" }),
    });
    expect(res.status).toBe(401);
  }
  auditKey = await server.createApiKey(["audit:read"]);
  otherKey = await server.createApiKey(["api_keys:read"]);
  h2 = new Http2SessionManager(server.url);
});
afterAll(async () => {
  h2?.abort();
  await server?.close();
});

async function login(username: string): Promise<string> {
  const res = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { token: string }).token;
}

interface AuditEventJson {
  seq: string;
  event_id: string;
  occurred_at: string;
  actor_type: string;
  actor_id: string;
  action: string;
  target: string;
  outcome: string;
  request_id: string;
  details: Record<string, unknown>;
  prev_hash: string;
  hash: string;
}

async function get(query: string, auth: { token?: string; key?: string } = {}) {
  const token = "token" in auth ? auth.token : auditor;
  const key = "key" in auth ? auth.key : auditKey;
  const res = await fetch(`${server.url}/api/admin/audit${query}`, {
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(key ? { "x-api-key": key } : {}),
    },
  });
  const body = (await res.json()) as {
    events?: AuditEventJson[];
    next_page_token?: string;
    details?: { reason: string; metadata?: { field?: string } }[];
  };
  return {
    status: res.status,
    body,
    events: body.events ?? [],
    reason: body.details?.[0]?.reason,
    field: body.details?.[0]?.metadata?.field,
  };
}

async function count(): Promise<number> {
  const { rows } = await server.core.db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM audit_events",
  );
  return rows[0]?.n ?? 0;
}

describe("GET /api/admin/audit", () => {
  it("lists events newest first, with their fields, for an auditor with an audit:read key", async () => {
    const res = await get("?page_size=1000");
    expect(res.status).toBe(200);
    const seqs = res.events.map((e) => BigInt(e.seq));
    expect(seqs.length).toBeGreaterThan(5);
    expect([...seqs].sort((a, b) => (a > b ? -1 : 1))).toEqual(seqs);
    expect(res.events[0]).toMatchObject({
      event_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      occurred_at: expect.stringMatching(/Z$/),
      hash: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    // Root is an admin: admins read too.
    expect((await get("", { token: root })).status).toBe(200);
  });

  it("filters by action, actor and outcome", async () => {
    const res = await get(`?action=login&actor_id=${veraId}&outcome=failure`);
    expect(res.status).toBe(200);
    expect(res.events).toHaveLength(2);
    for (const e of res.events) {
      expect(e).toMatchObject({ action: "login", actor_id: veraId, outcome: "failure" });
    }
    const creations = await get("?action=api_key_create&actor_type=system");
    expect(creations.events.map((e) => e.details.scopes)).toEqual([
      ["api_keys:read"],
      ["audit:read"],
    ]);
  });

  it("filters by time range", async () => {
    const all = (await get("?page_size=1000")).events;
    const middle = all[Math.floor(all.length / 2)];
    const since = encodeURIComponent(middle?.occurred_at ?? "");
    const newer = (await get(`?page_size=1000&since=${since}`)).events;
    expect(newer.length).toBeGreaterThan(0);
    expect(newer.every((e) => e.occurred_at >= (middle?.occurred_at ?? ""))).toBe(true);
    const older = (await get(`?page_size=1000&until=${since}`)).events;
    expect(older.every((e) => e.occurred_at < (middle?.occurred_at ?? ""))).toBe(true);
    expect(newer.length + older.length).toBe(all.length);
  });

  it("pages with a cursor, each event exactly once, and refuses a token for other filters", async () => {
    const all = (await get("?page_size=1000&action=login")).events.map((e) => e.seq);
    const seen: string[] = [];
    let token = "";
    do {
      const page = await get(`?page_size=2&action=login&page_token=${token}`);
      expect(page.status).toBe(200);
      seen.push(...page.events.map((e) => e.seq));
      token = page.body.next_page_token ?? "";
    } while (token);
    expect(seen).toEqual(all);
    const first = await get("?page_size=1&action=login");
    expect(
      await get(`?page_size=1&action=api_key_create&page_token=${first.body.next_page_token}`),
    ).toMatchObject({ status: 400, reason: "INVALID_PAGE_TOKEN", field: "page_token" });
  });

  it("answers 400 naming the field for bad filters", async () => {
    expect(await get("?actor_type=robot")).toMatchObject({ status: 400, field: "actor_type" });
    expect(await get("?outcome=maybe")).toMatchObject({ status: 400, field: "outcome" });
    expect(await get("?page_size=5000")).toMatchObject({ status: 400, field: "page_size" });
    expect(await get("?action=DROP%20TABLE")).toMatchObject({ status: 400, field: "action" });
    expect(await get("?since=not-a-time")).toMatchObject({ status: 400 });
    expect(await get("?since=2030-01-02T00:00:00Z&until=2030-01-01T00:00:00Z")).toMatchObject({
      status: 400,
      field: "until",
    });
  });

  it("needs the role and the audit:read scope", async () => {
    expect(await get("", { token: viewer })).toMatchObject({ status: 403, reason: "ROLE" });
    expect(await get("", { key: otherKey })).toMatchObject({
      status: 403,
      reason: "API_KEY_SCOPE",
    });
    expect(await get("", { key: undefined })).toMatchObject({
      status: 401,
      reason: "API_KEY_MISSING",
    });
    expect(await get("", { token: undefined })).toMatchObject({ status: 401 });
  });

  it("does not audit reading the log", async () => {
    const before = await count();
    expect((await get("?page_size=10")).status).toBe(200);
    expect((await get("?action=login")).status).toBe(200);
    expect(await count()).toBe(before);
  });
});

describe("AuditService over gRPC", () => {
  const client = (headers: Record<string, string>) =>
    createClient(
      AuditService,
      createGrpcTransport({
        baseUrl: server.url,
        sessionManager: h2,
        interceptors: [
          (next) => async (req) => {
            for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
            return next(req);
          },
        ],
      }),
    );

  it("lists with filters, and refuses a key without audit:read", async () => {
    const ok = client({ authorization: `Bearer ${auditor}`, "x-api-key": auditKey });
    const res = await ok.listAuditEvents({ action: "login", actorId: veraId, outcome: "failure" });
    expect(res.events).toHaveLength(2);
    expect(res.events[0]?.details).toBeDefined();
    const refused = await client({ authorization: `Bearer ${auditor}`, "x-api-key": otherKey })
      .listAuditEvents({})
      .catch((e: unknown) => ConnectError.from(e));
    expect(refused).toBeInstanceOf(ConnectError);
    const e = refused as ConnectError;
    expect(e.code).toBe(Code.PermissionDenied);
    expect(e.findDetails(ErrorInfoSchema)[0]?.reason).toBe("API_KEY_SCOPE");
  });
});
