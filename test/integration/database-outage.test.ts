import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verifyAuditChain } from "../../src/audit/index.js";
import {
  createPgCluster,
  type PgCluster,
  privateClustersAvailable,
} from "../support/pg-cluster.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * The core on a private PostgreSQL cluster that the test freezes (SIGSTOP: connections
 * accepted, no answers) and stops: every endpoint answers 503 DATABASE_UNAVAILABLE with
 * Retry-After within the configured bound (acquire + statement timeout), the process stays
 * up. Once the database is back, without a restart: /readyz says ready, every area answers
 * (a request may be sent once more after its Retry-After, as a client would), the next round
 * answers 200 the first time, and nothing acknowledged before is lost.
 */

const available = privateClustersAvailable("database outage");

const statementTimeoutMs = 1_000;
const acquireTimeoutMs = 1_000;
/** The documented bound, plus a generous margin for a busy machine (no speed check). */
const boundMs = acquireTimeoutMs + statementTimeoutMs;
const answerWithinMs = boundMs + 2_500;
/** How long the core may take to say it is ready once the database is back. */
const recoverWithinMs = 15_000;

const password = "outage-admin-password";

const envFor = (cluster: PgCluster): NodeJS.ProcessEnv => ({
  DB_CONNECTION: cluster.url,
  DB_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs),
  DB_ACQUIRE_TIMEOUT_MS: String(acquireTimeoutMs),
});

/**
 * The caches (user and session state, plugins, allowlist: 1 s) stay warm while this clock
 * is paused, and expire when the test moves it on.
 */
let offsetMs = 0;
let pausedAt: number | undefined;
const clock = { now: () => pausedAt ?? Date.now() + offsetMs };

interface Reply {
  status: number;
  reason: string | undefined;
  retryAfter: string | null;
  body: Record<string, unknown>;
}

describe.skipIf(!available)("the core while PostgreSQL is frozen or stopped", () => {
  let cluster: PgCluster;
  let server: TestServer;
  let plugin: Server;
  let token = "";
  let key = "";
  let serviceToken = "";
  let env: NodeJS.ProcessEnv = {};

  async function call(method: string, path: string, body?: unknown, bearer = token) {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: {
        "content-type": "application/json",
        "x-api-key": key,
        ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      // Without a bound the request would hang for good: end it, and let the test say so.
      signal: AbortSignal.timeout(answerWithinMs),
    });
    const json = (await res.json()) as Record<string, unknown>;
    const details = json.details as { reason?: string }[] | undefined;
    return {
      status: res.status,
      reason: details?.[0]?.reason,
      retryAfter: res.headers.get("retry-after"),
      body: json,
    } satisfies Reply;
  }

  /** One request per area that needs the database. */
  const requests: Record<string, () => Promise<Reply>> = {
    login: () => call("POST", "/auth/login", { username: "root", password }, ""),
    validate: () => call("GET", "/auth/validate"),
    "settings get": () => call("GET", "/api/admin/settings"),
    "settings update": () => call("POST", "/api/admin/settings", { "rag.top_k_default": 42 }),
    "policy evaluate": () =>
      call("POST", "/api/policy/evaluate", {
        traits: ["role:viewer"],
        context: "SEARCH",
        classifications: ["public"],
      }),
    "gateway call": () =>
      call("POST", "/gateway/echo/echo", { caller_plugin: "ai-core", payload: {} }, serviceToken),
    "audit query": () => call("GET", "/api/admin/audit?page_size=5"),
  };

  /**
   * Sends; after a 503 DATABASE_UNAVAILABLE, once more after its Retry-After, as the error
   * tells a client to. Right after a resume a request can still miss the 1 s bounds on a
   * loaded machine (new connections, the postmaster working through the connections queued
   * while it was frozen): one try again, not a loop that would hide a pool of bad connections.
   */
  async function sendAsClientWould(send: () => Promise<Reply>): Promise<Reply> {
    const reply = await send();
    if (reply.status !== 503 || reply.reason !== "DATABASE_UNAVAILABLE") return reply;
    await new Promise((resolve) => setTimeout(resolve, Number(reply.retryAfter ?? 1) * 1_000));
    return send();
  }

  /**
   * Back to work once the database is: /readyz answers 200 (within recoverWithinMs), every
   * area answers (each request may be sent again once), and then a round in which every
   * request answers 200 the first time.
   */
  async function expectRecovered() {
    let ready = false;
    const deadline = performance.now() + recoverWithinMs;
    while (!ready && performance.now() < deadline) {
      const res = await fetch(`${server.url}/readyz`, {
        signal: AbortSignal.timeout(answerWithinMs),
      }).catch(() => undefined);
      ready = res?.status === 200;
      if (!ready) await new Promise((resolve) => setTimeout(resolve, 250));
    }
    expect(ready, "/readyz after the database came back").toBe(true);
    await expectAllWorking({ retrying: true });
    await expectAllWorking();
  }

  /** Every request at once; with `retrying`, each is sent as a client would (above). */
  async function everyRequest(
    options: { except?: string[]; retrying?: boolean } = {},
  ): Promise<Record<string, Reply>> {
    const entries = await Promise.all(
      Object.entries(requests)
        .filter(([name]) => !options.except?.includes(name))
        .map(
          async ([name, send]) =>
            [name, options.retrying ? await sendAsClientWould(send) : await send()] as const,
        ),
    );
    return Object.fromEntries(entries);
  }

  function expectAllUnavailable(replies: Record<string, Reply>) {
    for (const [name, reply] of Object.entries(replies)) {
      expect([name, reply.status, reply.reason], JSON.stringify(reply.body)).toEqual([
        name,
        503,
        "DATABASE_UNAVAILABLE",
      ]);
      expect(reply.retryAfter, name).toBe("1");
    }
  }

  /**
   * Every area answers 200. Right after an outage a request may first get a 503 with
   * Retry-After (the bounds are 1 s): with `retrying`, it is sent again, as a client would.
   */
  async function expectAllWorking(options: { retrying?: boolean } = {}) {
    const replies = await everyRequest(options);
    for (const [name, reply] of Object.entries(replies)) {
      expect([name, reply.status], JSON.stringify(reply.body)).toEqual([name, 200]);
    }
    expect(replies.validate?.body.valid).toBe(true);
  }

  /** What was acknowledged: the audit events up to now, and the settings version. */
  async function acknowledged() {
    const { rows } = await server.core.db.query<{ seq: string; count: string }>(
      "SELECT max(seq)::text AS seq, count(*)::text AS count FROM audit_events",
    );
    const settings = await call("GET", "/api/admin/settings");
    expect(settings.status).toBe(200);
    return {
      lastSeq: rows[0]?.seq ?? "0",
      events: Number(rows[0]?.count),
      version: String(settings.body.version),
    };
  }

  async function expectNothingLost(before: Awaited<ReturnType<typeof acknowledged>>) {
    const { rows } = await server.core.db.query<{ count: string }>(
      "SELECT count(*)::text AS count FROM audit_events WHERE seq <= $1",
      [before.lastSeq],
    );
    expect(Number(rows[0]?.count)).toBe(before.events);
    expect(await verifyAuditChain(server.core.db)).toMatchObject({ ok: true });
    const settings = await call("GET", "/api/admin/settings");
    // The update refused during the outage did not happen behind the client's back.
    expect(settings.body.version).toBe(before.version);
    const history = await call("GET", "/api/admin/settings/history?page_size=1");
    expect((history.body.updates as { version: string }[])[0]?.version).toBe(before.version);
  }

  beforeAll(async () => {
    cluster = await createPgCluster();
    env = envFor(cluster);
    plugin = createServer((_req, res) => {
      res.setHeader("content-type", "application/json");
      res.end('{"ok":true}');
    });
    await new Promise<void>((resolve) => plugin.listen(0, "127.0.0.1", resolve));
    server = await startTestServer({
      clock,
      env,
      // Only a notification (or the re-read after reconnecting) brings other processes' changes.
      settingsPollIntervalMs: 600_000,
    });
    await server.createUser("root", password, ["admin"]);
    key = await server.createApiKey([
      "settings:read",
      "settings:write",
      "audit:read",
      "plugins:write",
      "operator:write",
      "service_accounts:write",
    ]);
    token = (await call("POST", "/auth/login", { username: "root", password }, "")).body
      .token as string;
    const account = await call("POST", "/api/admin/service-accounts", {
      name: "ai-core",
      roles: ["service"],
    });
    serviceToken = (
      await call(
        "POST",
        "/auth/token",
        {
          grant_type: "client_credentials",
          client_id: "ai-core",
          client_secret: account.body.client_secret,
        },
        "",
      )
    ).body.access_token as string;
    const registered = await call("POST", "/admin/plugins", {
      id: "echo",
      name: "Echo",
      plugin_type: "internal",
      endpoints: { echo: "/echo" },
      port: (plugin.address() as AddressInfo).port,
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const allowed = await call("PUT", "/admin/operator/allowlist", {
      caller: "ai-core",
      target: "echo",
      operations: ["echo"],
    });
    expect(allowed.status, JSON.stringify(allowed.body)).toBe(200);
    expect((await call("POST", "/api/admin/settings", { "rag.top_k_default": 7 })).status).toBe(
      200,
    );
  });

  afterAll(async () => {
    await cluster?.resume();
    await server?.close();
    await new Promise((resolve) => plugin?.close(resolve));
    await cluster?.drop();
  });

  it("answers 503 within the bound while frozen, and works again once resumed", async () => {
    await expectAllWorking();
    const before = await acknowledged();

    pausedAt = clock.now();
    await cluster.freeze();
    // Caches warm: the callers are known, so the database is first needed deeper in
    // (the audit writer's group commit, a transaction, a query). Validate may answer from
    // its cache; a gateway call waits for its event's commit (docs/operator-lane.md).
    expectAllUnavailable(await everyRequest({ except: ["validate"] }));
    pausedAt = undefined;
    offsetMs += 5_000; // every cache is stale: each request needs the database
    // Twice: the connections the first round gave up on are recycled, not leaked.
    expectAllUnavailable(await everyRequest());
    expectAllUnavailable(await everyRequest());
    const ready = await fetch(`${server.url}/readyz`, {
      signal: AbortSignal.timeout(answerWithinMs),
    });
    expect(ready.status).toBe(503);
    const alive = await fetch(`${server.url}/healthz`);
    expect(alive.status).toBe(200);

    await cluster.resume();
    await expectRecovered();
    await expectNothingLost(before);
  });

  it("answers 503 at once while stopped, and works again once restarted", async () => {
    const before = await acknowledged();
    const liveBefore = server.core.settings.current().version;

    await cluster.stop();
    offsetMs += 5_000;
    expectAllUnavailable(await everyRequest());

    await cluster.start();
    await expectRecovered();
    await expectNothingLost(before);
    // The settings follower listens again: a change another process makes now reaches this
    // one's live settings (through the notification, or the re-read after reconnecting).
    const other = await startTestServer({ env });
    try {
      const changed = await fetch(`${other.url}/api/admin/settings`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${token}`,
          "x-api-key": key,
        },
        body: JSON.stringify({ "rag.top_k_default": 9 }),
      });
      expect(changed.status).toBe(200);
      await until(() => server.core.settings.current().version > liveBefore, 10_000);
    } finally {
      await other.close();
    }
  });
});
