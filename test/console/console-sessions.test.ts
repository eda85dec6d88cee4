import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createConsoleSessionStore } from "../../src/console/session-store.js";
import {
  createConsoleSessions,
  endsSession,
  type TokenRefresher,
} from "../../src/console/sessions.js";
import { createSecretBox, parseDataKeys } from "../../src/crypto/secret-box.js";
import { createUserStore } from "../../src/identity/user-store.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { databaseTargets } from "../support/database.js";
import { testDataKey } from "../support/server.js";

/**
 * Console sessions on each database: sealed at rest, ended when idle, and refreshed by one
 * replica at a time without ever reusing a refresh token another replica used up.
 */
describe.each(databaseTargets())("console sessions on $name", (target) => {
  let db: Database;
  let userId: string;
  const clock = { t: Date.parse("2026-01-01T00:00:00Z"), now: () => clock.t };
  const box = createSecretBox(parseDataKeys(testDataKey));
  /** A stand-in identity service: refresh tokens are single-use, as the real one's are. */
  const used = new Set<string>();
  let issued = 0;
  /** What the next refresh throws instead of answering (an outage, a refusal). */
  let failNext: Error | undefined;
  const refresh: TokenRefresher = async (token) => {
    if (failNext) {
      const err = failNext;
      failNext = undefined;
      throw err;
    }
    if (used.has(token)) throw new Error("refresh token reused: family revoked");
    used.add(token);
    issued++;
    return {
      access: `access-${issued}`,
      refresh: `refresh-${issued}`,
      accessExpiresAt: clock.t + 900_000,
    };
  };
  const replica = () =>
    createConsoleSessions({
      store: createConsoleSessionStore(db),
      box,
      log: silentLogger,
      idleTimeoutSeconds: 600,
      refresh,
      now: clock.now,
    });
  const newSession = (
    secrets = { access: "access-0", refresh: "refresh-0", accessExpiresAt: clock.t + 30_000 },
  ) =>
    replica().create({
      stage: "active",
      userId,
      username: "u",
      roles: ["admin"],
      mfa: true,
      secrets,
      clientAddress: "192.0.2.7",
    });

  beforeAll(async () => {
    db = await target.open();
    await migrate(db, silentLogger);
    const user = await createUserStore(db).create({
      username: `c-${randomUUID().slice(0, 8)}`,
      email: "",
      passwordHash: "x",
      roles: [],
    });
    userId = user.id;
  });
  afterAll(async () => db?.close());

  it("keeps the tokens sealed and only a hash of the cookie", async () => {
    const cookie = await newSession({
      access: "secret-access",
      refresh: "secret-refresh",
      accessExpiresAt: clock.t + 900_000,
    });
    const { rows } = await db.query<Record<string, unknown>>("SELECT * FROM console_sessions");
    const text = JSON.stringify(rows);
    expect(text).not.toContain(cookie);
    expect(text).not.toContain("secret-access");
    expect(text).not.toContain("secret-refresh");
    expect((await replica().load(cookie))?.secrets.access).toBe("secret-access");
    expect(await replica().load("not-a-cookie")).toBeUndefined();
  });

  it("ends a session left idle longer than the timeout, and not one in use", async () => {
    const sessions = replica();
    const cookie = await newSession();
    clock.t += 500_000;
    expect(await sessions.load(cookie)).toBeDefined();
    clock.t += 500_000;
    expect(await sessions.load(cookie)).toBeDefined();
    clock.t += 600_001;
    expect(await sessions.load(cookie)).toBeUndefined();
    clock.t += 1;
    expect(await sessions.load(cookie)).toBeUndefined();
  });

  it("refreshes once across replicas that read the same row", async () => {
    const cookie = await newSession();
    const [a, b] = [replica(), replica()];
    const seenByA = await a.load(cookie);
    const seenByB = await b.load(cookie);
    if (!seenByA || !seenByB) throw new Error("session not found");
    const before = issued;
    const fromA = await a.fresh(seenByA);
    // B still holds the row as it was: it must take A's tokens, not spend refresh-0 again.
    const fromB = await b.fresh(seenByB);
    expect(issued).toBe(before + 1);
    expect(fromB.access).toBe(fromA.access);
    expect((await replica().load(cookie))?.secrets.access).toBe(fromA.access);
  });

  it("uses the current token while another replica holds the refresh lease", async () => {
    const cookie = await newSession({
      access: "still-good",
      refresh: "r-lease",
      accessExpiresAt: clock.t + 20_000,
    });
    const session = await replica().load(cookie);
    if (!session) throw new Error("session not found");
    const store = createConsoleSessionStore(db);
    expect(
      await store.takeRefreshLease(session.idHash, new Date(clock.t), new Date(clock.t + 10_000)),
    ).toBe(true);
    const before = issued;
    expect((await replica().fresh(session)).access).toBe("still-good");
    expect(issued).toBe(before);
  });

  it("keeps the session through a refresh that got no answer, not through a refused one", async () => {
    const cookie = await newSession({
      access: "a-out",
      refresh: "r-out",
      accessExpiresAt: clock.t + 1_000,
    });
    const sessions = replica();
    const session = await sessions.load(cookie);
    if (!session) throw new Error("session not found");
    failNext = new ConnectError("database unavailable", Code.Unavailable);
    const outage = await sessions.fresh(session).catch((e: unknown) => e);
    expect(endsSession(outage)).toBe(false);
    // The lease was given back: the next request refreshes at once, with the same token.
    const fresh = await sessions.fresh(session);
    expect(fresh.access).toMatch(/^access-\d+$/);
    failNext = new ConnectError("refresh token revoked", Code.Unauthenticated);
    const later = await replica().load(cookie);
    if (!later) throw new Error("session not found");
    const refused = await sessions
      .fresh({ ...later, secrets: { ...later.secrets, accessExpiresAt: clock.t } })
      .catch((e: unknown) => e);
    expect(endsSession(refused)).toBe(true);
  });
});
