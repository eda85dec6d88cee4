import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSessionStore, hashRefreshToken } from "../../src/identity/session-store.js";
import { createUserStore } from "../../src/identity/user-store.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { databaseTargets } from "../support/database.js";

const maxLifetime = 7200;

describe.each(databaseTargets())("session store on $name", (target) => {
  let db: Database;
  let userId: string;

  beforeAll(async () => {
    db = await target.open();
    await migrate(db, silentLogger);
    const user = await createUserStore(db).create({
      username: `u-${randomUUID().slice(0, 8)}`,
      email: "",
      passwordHash: "x",
      roles: [],
    });
    userId = user.id;
  });
  afterAll(async () => db?.close());

  it("stores only a hash of the refresh token", async () => {
    const sessions = createSessionStore(db, { maxLifetimeSeconds: maxLifetime });
    const { refreshToken, sessionId } = await sessions.create(userId, 3600);
    expect(refreshToken).toMatch(/^rt_[A-Za-z0-9_-]{43}$/);
    const { rows } = await db.query<{ token_hash: string }>(
      "SELECT token_hash FROM refresh_tokens WHERE session_id = $1",
      [sessionId],
    );
    expect(rows).toEqual([{ token_hash: hashRefreshToken(refreshToken) }]);
  });

  it("rotates once, and a reused token revokes the session (the newest token too)", async () => {
    const sessions = createSessionStore(db, { maxLifetimeSeconds: maxLifetime });
    const first = await sessions.create(userId, 3600);
    const second = await sessions.refresh(first.refreshToken, 3600);
    expect(second).toMatchObject({ kind: "rotated", sessionId: first.sessionId, userId });
    expect(first).toMatchObject({ refreshExpiresIn: 3600, sessionExpiresIn: maxLifetime });
    const newest = second.kind === "rotated" ? second.refreshToken : "";
    expect(await sessions.refresh(first.refreshToken, 3600)).toMatchObject({ kind: "reused" });
    expect(await sessions.find(first.sessionId)).toMatchObject({ revoked: true });
    expect(await sessions.refresh(newest, 3600)).toEqual({ kind: "revoked" });
  });

  it("lets only one of two concurrent refreshes with the same token rotate", async () => {
    const sessions = createSessionStore(db, { maxLifetimeSeconds: maxLifetime });
    const { refreshToken } = await sessions.create(userId, 3600);
    const outcomes = await Promise.all([
      sessions.refresh(refreshToken, 3600),
      sessions.refresh(refreshToken, 3600),
    ]);
    expect(outcomes.map((o) => o.kind).sort()).toEqual(["reused", "rotated"]);
  });

  it("refuses unknown and expired tokens", async () => {
    const sessions = createSessionStore(db, { maxLifetimeSeconds: maxLifetime });
    expect(await sessions.refresh("rt_nonsense", 3600)).toEqual({ kind: "unknown" });
    const { refreshToken, sessionId } = await sessions.create(userId, 3600);
    await db.query(
      "UPDATE refresh_tokens SET expires_at = now() - interval '1 second' WHERE session_id = $1",
      [sessionId],
    );
    expect(await sessions.refresh(refreshToken, 3600)).toEqual({ kind: "expired" });
  });

  it("revokes one session or all of a user's", async () => {
    const sessions = createSessionStore(db, { maxLifetimeSeconds: maxLifetime });
    const a = await sessions.create(userId, 3600);
    const b = await sessions.create(userId, 3600);
    expect(await sessions.revoke(a.sessionId, "logout")).toBe(true);
    expect(await sessions.revoke(a.sessionId, "logout")).toBe(false);
    const all = await sessions.revokeAll(userId, "logout_all");
    expect(all).toContain(b.sessionId);
    expect(all).not.toContain(a.sessionId);
    expect(await sessions.find(b.sessionId)).toMatchObject({ revoked: true, userId });
  });

  /** Moves the session's login `secondsAgo` into the past. */
  const loggedInAgo = (sessionId: string, secondsAgo: number) =>
    db.query("UPDATE sessions SET created_at = now() - make_interval(secs => $2) WHERE id = $1", [
      sessionId,
      secondsAgo,
    ]);

  it("caps a refresh token at the session's absolute end, and refuses refresh after it", async () => {
    const sessions = createSessionStore(db, { maxLifetimeSeconds: maxLifetime });
    const first = await sessions.create(userId, 10_000);
    expect(first).toMatchObject({ refreshExpiresIn: maxLifetime, sessionExpiresIn: maxLifetime });
    await loggedInAgo(first.sessionId, maxLifetime - 100);
    const late = await sessions.refresh(first.refreshToken, 3600);
    if (late.kind !== "rotated") throw new Error(`expected a rotation, got ${late.kind}`);
    expect(late.sessionExpiresIn).toBeGreaterThan(0);
    expect(late.sessionExpiresIn).toBeLessThanOrEqual(100);
    expect(late.refreshExpiresIn).toBe(late.sessionExpiresIn);
    const { rows } = await db.query<{ capped: boolean }>(
      `SELECT t.expires_at <= s.created_at + make_interval(secs => $2) AS capped
         FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id
        WHERE t.token_hash = $1`,
      [hashRefreshToken(late.refreshToken), maxLifetime],
    );
    expect(rows).toEqual([{ capped: true }]);
    // Past the end, even with a refresh token that would run longer (issued before the limit).
    await loggedInAgo(first.sessionId, maxLifetime);
    await db.query(
      "UPDATE refresh_tokens SET expires_at = now() + interval '7 days' WHERE session_id = $1",
      [first.sessionId],
    );
    expect(await sessions.refresh(late.refreshToken, 3600)).toEqual({ kind: "expired" });
    // A used token of an ended session still counts as reuse.
    expect(await sessions.refresh(first.refreshToken, 3600)).toMatchObject({ kind: "reused" });
  });
});
