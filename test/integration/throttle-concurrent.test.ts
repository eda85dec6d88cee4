import { generateSync } from "otplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultThrottlePolicy, type ThrottlePolicy } from "../../src/identity/throttle.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { postFrom, tally } from "../support/from-address.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Throttling holds for attempts sent at once: each attempt is reserved before its password
 * or code is checked, so N + 20 concurrent attempts get no more than the documented N
 * checked, on PGlite (counters in the process) and on PostgreSQL (counters in the database).
 * Every request below opens its own connection, and all are sent before any is answered.
 */

const password = "concurrent-victims-password";
const { address, pair, account } = defaultThrottlePolicy;
// The documented numbers of free attempts; waits after them long enough that no attempt of
// these tests gets past one, however slow the machine.
const long = 10 * 60_000;
const documented: ThrottlePolicy = {
  ...defaultThrottlePolicy,
  address: { ...address, baseMs: long },
  pair: { ...pair, baseMs: long },
};
// Password attempts out of reach, second-factor attempts at the documented numbers.
const secondFactorOnly: ThrottlePolicy = {
  ...defaultThrottlePolicy,
  address: { ...address, free: 1_000, block: 10_000 },
  pair: { ...pair, free: 1_000 },
  account: { ...account, free: 1_000 },
  secondFactor: documented,
};

const login = (server: TestServer, from: string, body: Record<string, unknown>) =>
  postFrom(from, server.url, "/auth/login", body);

/** Turns MFA on for a user (from 127.0.0.1); its TOTP secret. */
async function enableMfa(server: TestServer, username: string): Promise<string> {
  const { token } = (await callJson(server.url, "/auth/login", { username, password })).body as {
    token: string;
  };
  const enrol = await callJson(server.url, "/auth/mfa/enroll", {}, { token });
  const secret = enrol.body.secret as string;
  const code = generateSync({ secret, epoch: Math.floor(Date.now() / 1000) });
  const activated = await callJson(server.url, "/auth/mfa/activate", { code }, { token });
  expect(activated.status).toBe(200);
  return secret;
}

/** `n` six-digit codes, none of them valid now (the current step or one either side). */
function wrongCodes(secret: string, n: number): string[] {
  const now = Math.floor(Date.now() / 1000);
  const valid = new Set([-1, 0, 1, 2].map((s) => generateSync({ secret, epoch: now + s * 30 })));
  const codes: string[] = [];
  for (let i = 1; codes.length < n; i++) {
    const candidate = String((i * 104_729) % 1_000_000).padStart(6, "0");
    if (!valid.has(candidate)) codes.push(candidate);
  }
  return codes;
}

describe.each(databaseTargets())("concurrent login attempts on $name", (target) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({
      db: await openTestDatabase(target),
      throttlePolicy: documented,
    });
    await server.createUser("victim", password);
    await server.createUser("mia", password);
  });
  afterAll(async () => server?.close());

  it(`of ${pair.free + 20} wrong passwords for one account from one address, ${pair.free} are checked`, async () => {
    const replies = await Promise.all(
      Array.from({ length: pair.free + 20 }, (_, i) =>
        login(server, "127.0.0.2", { username: "victim", password: `wrong-${i}` }),
      ),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_CREDENTIALS": pair.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
    for (const r of replies.filter((r) => r.status === 429)) {
      expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
    }
  });

  it(`of ${address.free + 20} wrong logins for as many accounts from one address, ${address.free} are checked`, async () => {
    const replies = await Promise.all(
      Array.from({ length: address.free + 20 }, (_, i) =>
        login(server, "127.0.0.3", { username: `nobody-${i}`, password: "wrong-password" }),
      ),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_CREDENTIALS": address.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
  });

  it(`of ${pair.free + 20} right passwords with wrong codes from one address, ${pair.free} codes are checked`, async () => {
    const secret = await enableMfa(server, "mia");
    const replies = await Promise.all(
      wrongCodes(secret, pair.free + 20).map((totp_code) =>
        login(server, "127.0.0.4", { username: "mia", password, totp_code }),
      ),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_MFA_CODE": pair.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
  });

  it(`of ${pair.free + 20} service token requests with wrong secrets from one address, ${pair.free} are checked`, async () => {
    const replies = await Promise.all(
      Array.from({ length: pair.free + 20 }, (_, i) =>
        postFrom("127.0.0.9", server.url, "/auth/token", {
          grant_type: "client_credentials",
          client_id: "ai-core",
          client_secret: `tgs_wrong-${i}`,
        }),
      ),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_CLIENT": pair.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
  });

  it.skipIf(target.name !== "postgres")(
    "fails closed: when the counters cannot be read, the right password gets 503, not a token",
    async () => {
      const db = server.core.db;
      await db.exec("ALTER TABLE login_throttle RENAME TO login_throttle_away");
      try {
        const reply = await login(server, "127.0.0.8", { username: "victim", password });
        expect(reply).toMatchObject({ status: 503, reason: "THROTTLE_UNAVAILABLE" });
        expect(reply.body.token).toBeUndefined();
      } finally {
        await db.exec("ALTER TABLE login_throttle_away RENAME TO login_throttle");
      }
      expect((await login(server, "127.0.0.8", { username: "victim", password })).status).toBe(200);
    },
  );
});

describe.each(databaseTargets())("second-factor counters of their own on $name", (target) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({
      db: await openTestDatabase(target),
      throttlePolicy: secondFactorOnly,
    });
    await server.createUser("mia", password);
  });
  afterAll(async () => server?.close());

  it("limits concurrent code guesses by someone who knows the password, and a right password does not reset them", async () => {
    const secret = await enableMfa(server, "mia");
    const codes = wrongCodes(secret, pair.free + 21);
    const replies = await Promise.all(
      codes
        .slice(1)
        .map((totp_code) => login(server, "127.0.0.5", { username: "mia", password, totp_code })),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_MFA_CODE": pair.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
    // The password is right (it resets the password counters), the code counters stay.
    expect(await login(server, "127.0.0.5", { username: "mia", password })).toMatchObject({
      status: 401,
      reason: "MFA_REQUIRED",
    });
    expect(
      await login(server, "127.0.0.5", { username: "mia", password, totp_code: codes[0] }),
    ).toMatchObject({ status: 429, reason: "TOO_MANY_ATTEMPTS" });
  });
});

describe("the account-wide slow-down, concurrently", () => {
  // Two free failures per account, then 200 ms, 400 ms, 800 ms, 1.6 s.
  const slowing: ThrottlePolicy = {
    ...documented,
    account: { free: 2, baseMs: 200, maxDelayMs: 1_600 },
  };
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ throttlePolicy: slowing });
    await server.createUser("slowed", password);
  });
  afterAll(async () => server?.close());

  it("gives each attempt its own wait by its place, instead of one wait they all pass together", async () => {
    const from = ["127.0.0.6", "127.0.0.6", "127.0.0.6", "127.0.0.7", "127.0.0.7", "127.0.0.7"];
    const started = performance.now();
    const replies = await Promise.all(
      from.map((address, i) =>
        login(server, address, { username: "slowed", password: `wrong-${i}` }).then((r) => ({
          ...r,
          tookMs: performance.now() - started,
        })),
      ),
    );
    // Three per address: none refused, all checked, all slowed by their place on the account.
    expect(tally(replies)).toEqual({ "401:INVALID_CREDENTIALS": 6 });
    const waits = server.logs
      .map((line) => JSON.parse(line) as { event?: string; delay_ms?: number })
      .filter((l) => l.event === "login_slowed")
      .map((l) => l.delay_ms)
      .sort((x, y) => (x ?? 0) - (y ?? 0));
    expect(waits).toEqual([200, 400, 800, 1_600]);
    // A wait is a lower bound whatever the machine's load: the last answer came after it.
    expect(Math.max(...replies.map((r) => r.tookMs))).toBeGreaterThanOrEqual(1_600);
  });
});
