import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sendJson } from "../support/origin-client.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Who the client is, against a real core with TRUSTED_PROXIES set (docs/audit.md, "Where a
 * request came from"): X-Forwarded-For counts only when the TCP peer is a trusted proxy, and
 * the address it names is the one the audit log, the login throttle, the sampling of
 * anonymous refusals and the access log use. Clients bind to loopback addresses: 127.0.0.2
 * is a trusted proxy, 127.0.0.3 is not.
 */

const proxy = "127.0.0.2";
const stranger = "127.0.0.3";
const password = "client-origin-password";
let server: TestServer;
let sent = 0;

beforeAll(async () => {
  server = await startTestServer({ env: { TRUSTED_PROXIES: `${proxy},10.0.0.0/8` } });
  for (const user of ["probe", "victim", "target"]) await server.createUser(user, password);
});
afterAll(async () => server?.close());

/** A login from `from`, with X-Forwarded-For if given; its request id and answer. */
async function login(
  from: string,
  pw: string,
  forwardedFor?: string,
  agent = "origin-it/1",
  username = "probe",
) {
  const id = `client-origin-${++sent}`;
  const reply = await sendJson(
    server.url,
    "/auth/login",
    { username, password: pw },
    {
      from,
      headers: {
        "x-request-id": id,
        "user-agent": agent,
        ...(forwardedFor === undefined ? {} : { "x-forwarded-for": forwardedFor }),
      },
    },
  );
  return { id, reply };
}

async function eventOf(requestId: string) {
  const { rows } = await server.core.db.query<{
    action: string;
    client_address: string | null;
    user_agent: string | null;
    details: Record<string, unknown>;
  }>("SELECT action, client_address, user_agent, details FROM audit_events WHERE request_id = $1", [
    requestId,
  ]);
  return rows[0];
}

function accessLine(requestId: string): Record<string, unknown> | undefined {
  return server.logs
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((line) => line.msg === "call" && line.request_id === requestId);
}

describe("the client address", () => {
  it("ignores X-Forwarded-For from a peer that is not a trusted proxy", async () => {
    const { id } = await login(stranger, "wrong-password-1", "203.0.113.9");
    expect(await eventOf(id)).toMatchObject({
      action: "login",
      client_address: stranger,
      user_agent: "origin-it/1",
      details: { client_address: stranger },
    });
    expect(accessLine(id)).toMatchObject({ client_address: stranger });
    expect(accessLine(id)).not.toHaveProperty("peer_address");
  });

  it("takes the client a trusted proxy names, and logs the proxy as the peer", async () => {
    const { id } = await login(proxy, "wrong-password-2", "203.0.113.9");
    expect(await eventOf(id)).toMatchObject({
      client_address: "203.0.113.9",
      details: { client_address: "203.0.113.9" },
    });
    expect(accessLine(id)).toMatchObject({
      client_address: "203.0.113.9",
      peer_address: proxy,
    });
  });

  it("walks a chain of trusted proxies to the first address that is not one", async () => {
    const { id } = await login(
      proxy,
      "wrong-password-3",
      "198.51.100.66, 203.0.113.10, ::ffff:10.1.1.1, 10.2.2.2",
    );
    expect((await eventOf(id))?.client_address).toBe("203.0.113.10");
  });

  it("keeps the User-Agent out of every log line", async () => {
    const agent = "origin-it-secret-looking-agent/9.9";
    const { id } = await login(proxy, "wrong-password-4", "203.0.113.11", agent);
    expect((await eventOf(id))?.user_agent).toBe(agent);
    expect(accessLine(id)).toBeDefined();
    expect(server.logs.filter((line) => line.includes("origin-it-secret-looking"))).toEqual([]);
  });
});

describe("the login throttle", () => {
  it("counts a client behind a trusted proxy by its own address", async () => {
    const attacker = "203.0.113.20";
    let refused = false;
    for (let i = 0; i < 15 && !refused; i++) {
      refused = (await login(proxy, `guess-${i}`, attacker, "a", "victim")).reply.status === 429;
    }
    expect(refused).toBe(true);
    expect((await login(proxy, password, attacker, "a", "victim")).reply.status).toBe(429);
    // Another client behind the same proxy is not the attacker.
    const victim = await login(proxy, password, "203.0.113.21", "a", "victim");
    expect(victim.reply.status, JSON.stringify(victim.reply.body)).toBe(200);
  });

  it("cannot be dodged with a forged X-Forwarded-For from an untrusted peer", async () => {
    let refused = false;
    for (let i = 0; i < 15 && !refused; i++) {
      const forged = `198.51.100.${i + 1}`;
      refused = (await login(stranger, `guess-${i}`, forged, "a", "target")).reply.status === 429;
    }
    expect(refused).toBe(true);
  });
});

describe("the sampling of anonymous refusals", () => {
  it("samples per client, not per proxy", async () => {
    const refuse = (forwardedFor: string) => {
      const id = `client-origin-${++sent}`;
      return sendJson(server.url, "/api/admin/settings", undefined, {
        from: proxy,
        method: "GET",
        headers: { "x-request-id": id, "x-forwarded-for": forwardedFor },
      }).then((reply) => ({ id, reply }));
    };
    // One client uses up its events of the minute (20 of its own, docs/audit.md) ...
    const flood: string[] = [];
    for (let i = 0; i < 21; i++) {
      const { id, reply } = await refuse("203.0.113.30");
      expect(reply.status).toBe(401);
      flood.push(id);
    }
    expect(await eventOf(flood[0] ?? "")).toMatchObject({
      action: "access_denied",
      client_address: "203.0.113.30",
    });
    expect(await eventOf(flood[20] ?? "")).toBeUndefined();
    // ... and another one behind the same proxy still gets its own.
    const other = await refuse("203.0.113.31");
    expect(await eventOf(other.id)).toMatchObject({
      action: "access_denied",
      client_address: "203.0.113.31",
      details: { client_address: "203.0.113.31", count: 1 },
    });
  });
});
