import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verifyAuditChain } from "../../src/audit/index.js";
import { startTestServer, type TestServer } from "../support/server.js";

const password = "quiet harbour lantern 4721";
let server: TestServer;
let userId: string;

beforeAll(async () => {
  server = await startTestServer();
  userId = await server.createUser("alice", password, ["clinician"]);
  await server.createUser("bob", "bobs-password-is-long", ["viewer"]);
});
afterAll(async () => server?.close());

async function post(path: string, body: string, headers: Record<string, string> = {}) {
  return fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
}

async function login(username: string, pw: string) {
  return post("/auth/login", JSON.stringify({ username, password: pw }));
}

async function validate(authorization?: string) {
  const res = await fetch(`${server.url}/auth/validate`, {
    headers: authorization === undefined ? {} : { authorization },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

function reason(body: { details?: { reason?: string }[] }): string | undefined {
  return body.details?.find((d) => d.reason !== undefined)?.reason;
}

describe("login and validate over REST", () => {
  it("logs in and validates the token", async () => {
    const res = await login("alice", password);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    const body = (await res.json()) as { token: string; token_type: string; expires_in: number };
    expect(body.token_type).toBe("Bearer");
    expect(body.expires_in).toBe(900);
    const v = await validate(`Bearer ${body.token}`);
    expect(v).toMatchObject({
      valid: true,
      reason: "",
      user_id: userId,
      username: "alice",
      roles: ["clinician"],
    });
    expect(typeof v.expires_at).toBe("string");
  });

  it("is case-insensitive on the username", async () => {
    expect((await login("ALICE", password)).status).toBe(200);
  });

  it("accepts lowerCamel and snake_case field names alike", async () => {
    expect(
      (await post("/auth/login", JSON.stringify({ username: "alice", password }))).status,
    ).toBe(200);
  });

  it("emits default values: an invalid token is valid:false with a reason", async () => {
    expect(await validate()).toMatchObject({ valid: false, reason: "missing", roles: [] });
    expect(await validate("Basic abc")).toMatchObject({ valid: false, reason: "malformed" });
    expect(await validate("Bearer garbage")).toMatchObject({ valid: false, reason: "malformed" });
  });

  it("answers wrong password, unknown user and inactive user with the same 401", async () => {
    const carol = await server.createUser("carol", "carols-password-is-long");
    await server.core.identity.setActive(carol, false);
    const bodies: { details?: { reason?: string }[] }[] = [];
    for (const [u, p] of [
      ["alice", "wrong password here"],
      ["nobody", "whatever-password"],
      ["carol", "carols-password-is-long"],
    ] as const) {
      const res = await login(u, p);
      expect(res.status).toBe(401);
      bodies.push((await res.json()) as { details?: { reason?: string }[] });
    }
    expect(bodies[0]).toMatchObject({
      code: "unauthenticated",
      message: "invalid username or password",
    });
    expect(reason(bodies[0] ?? {})).toBe("INVALID_CREDENTIALS");
    expect(bodies[1]).toEqual(bodies[0]);
    expect(bodies[2]).toEqual(bodies[0]);
  });

  it("invalidates the token of a deactivated user at the next validate", async () => {
    const id = await server.createUser("dave", "daves-password-is-long");
    const { token } = (await (await login("dave", "daves-password-is-long")).json()) as {
      token: string;
    };
    expect((await validate(`Bearer ${token}`)).valid).toBe(true);
    await server.core.identity.setActive(id, false);
    expect(await validate(`Bearer ${token}`)).toMatchObject({
      valid: false,
      reason: "user_inactive",
    });
  });

  it("rejects malformed JSON with 400 invalid_argument", async () => {
    const res = await post("/auth/login", "{not json");
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument" });
  });

  it("rejects a missing username with 400 naming the field", async () => {
    const res = await post("/auth/login", JSON.stringify({ password: "x" }));
    expect(res.status).toBe(400);
    const body = (await res.json()) as {
      code: string;
      message: string;
      details: { metadata?: { field?: string } }[];
    };
    expect(body.code).toBe("invalid_argument");
    expect(body.message).toContain("username");
    expect(body.details.find((d) => d.metadata?.field)?.metadata?.field).toBe("username");
  });

  it("answers 404 for an unknown path and 405 with Allow for a wrong method", async () => {
    const notFound = await fetch(`${server.url}/auth/nothing`);
    expect(notFound.status).toBe(404);
    expect(await notFound.json()).toMatchObject({ code: "not_found" });
    const wrongMethod = await fetch(`${server.url}/auth/login`);
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get("allow")).toContain("POST");
  });

  it("answers 413 for an oversized body", async () => {
    const res = await post(
      "/auth/login",
      JSON.stringify({ username: "a", password: "x".repeat(2_000_000) }),
    );
    expect(res.status).toBe(413);
  });

  it("echoes a sane x-request-id and generates one otherwise", async () => {
    const res = await login("alice", password);
    expect(res.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    const given = await post("/auth/login", JSON.stringify({ username: "alice", password }), {
      "x-request-id": "req-123",
    });
    expect(given.headers.get("x-request-id")).toBe("req-123");
  });

  it("serves health and readiness", async () => {
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ok" });
  });

  it("never writes a password, token or authorization value to the logs", async () => {
    const secretPassword = "marker-password-7f3a9c";
    await server.createUser("erin", secretPassword);
    const { token } = (await (await login("erin", secretPassword)).json()) as { token: string };
    await validate(`Bearer ${token}`);
    await login("erin", "marker-wrong-password-1b2c");
    const text = server.logs.join("");
    expect(text.length).toBeGreaterThan(0);
    expect(text).toContain("login_succeeded");
    for (const secret of [
      secretPassword,
      "marker-wrong-password-1b2c",
      token,
      token.split(".")[2] ?? "x",
    ]) {
      expect(text).not.toContain(secret);
    }
    expect(text.toLowerCase()).not.toContain("bearer");
  });

  it("commits every login to the audit log, whose chain verifies", async () => {
    const { rows } = await server.core.db.query<{ outcome: string; details: { cause?: string } }>(
      "SELECT outcome, details FROM audit_events WHERE action = 'login' ORDER BY seq",
    );
    expect(rows.some((r) => r.outcome === "success")).toBe(true);
    expect(rows.some((r) => r.outcome === "failure" && r.details.cause === "wrong_password")).toBe(
      true,
    );
    expect(rows.some((r) => r.outcome === "failure" && r.details.cause === "user_inactive")).toBe(
      true,
    );
    expect(await verifyAuditChain(server.core.db)).toMatchObject({ ok: true });
  });
});
