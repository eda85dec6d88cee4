import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { verifyAuditChain } from "../../src/audit/index.js";
import { postgresUrlFor, twoHandlesOnOneSchema } from "../support/database.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Two servers sharing one PostgreSQL database, each with its own caches and its
 * own clock: a change made through one is refused by the other once its
 * one-second state cache has expired (the documented bound), with no restart.
 */

const url = postgresUrlFor("two-servers");
const password = "shared-db-password-long";

describe.skipIf(!url)("two servers on one PostgreSQL", () => {
  let a: TestServer;
  let b: TestServer;
  const clockB = { t: Date.now(), now: () => clockB.t };

  beforeAll(async () => {
    const [dbA, dbB] = await twoHandlesOnOneSchema(url ?? "");
    // B closes first (afterAll), A drops the schema when it closes.
    b = await startTestServer({ db: dbB, clock: clockB });
    a = await startTestServer({ db: dbA });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  async function login(server: TestServer, username: string) {
    const res = await fetch(`${server.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username, password }),
    });
    return ((await res.json()) as { token: string }).token;
  }

  async function validate(server: TestServer, token: string) {
    const res = await fetch(`${server.url}/auth/validate`, {
      headers: { authorization: `Bearer ${token}` },
    });
    return (await res.json()) as { valid: boolean; reason: string };
  }

  it("a user deactivated on A is refused on B after at most one second", async () => {
    const id = await a.createUser("shared-user", password);
    const token = await login(a, "shared-user");
    expect((await validate(b, token)).valid).toBe(true);
    await a.core.identity.setActive(id, false);
    expect(await validate(a, token)).toMatchObject({ valid: false, reason: "user_inactive" });
    clockB.t += 1_001;
    expect(await validate(b, token)).toMatchObject({ valid: false, reason: "user_inactive" });
  });

  it("a session logged out on A is refused on B after at most one second", async () => {
    await a.createUser("shared-two", password);
    const token = await login(b, "shared-two");
    expect((await validate(a, token)).valid).toBe(true);
    expect((await validate(b, token)).valid).toBe(true);
    const out = await fetch(`${a.url}/auth/logout`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: "{}",
    });
    expect(out.status).toBe(200);
    clockB.t += 1_001;
    expect(await validate(b, token)).toMatchObject({ valid: false, reason: "revoked" });
  });

  it("both servers append to one audit chain", async () => {
    const { rows } = await a.core.db.query<{ n: string }>("SELECT count(*) AS n FROM audit_events");
    expect(Number(rows[0]?.n)).toBeGreaterThanOrEqual(2);
    expect(await verifyAuditChain(a.core.db)).toMatchObject({ ok: true });
  });
});
