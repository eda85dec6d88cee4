import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSessionStore, hashRefreshToken } from "../../src/identity/session-store.js";
import { createUserStore } from "../../src/identity/user-store.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { databaseTargets } from "../support/database.js";

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
    const sessions = createSessionStore(db);
    const { refreshToken, sessionId } = await sessions.create(userId, 3600);
    expect(refreshToken).toMatch(/^rt_[A-Za-z0-9_-]{43}$/);
    const { rows } = await db.query<{ token_hash: string }>(
      "SELECT token_hash FROM refresh_tokens WHERE session_id = $1",
      [sessionId],
    );
    expect(rows).toEqual([{ token_hash: hashRefreshToken(refreshToken) }]);
  });

  it("rotates once, and a reused token revokes the session (the newest token too)", async () => {
    const sessions = createSessionStore(db);
    const first = await sessions.create(userId, 3600);
    const second = await sessions.refresh(first.refreshToken, 3600);
    expect(second).toMatchObject({ kind: "rotated", sessionId: first.sessionId, userId });
    const newest = second.kind === "rotated" ? second.refreshToken : "";
    expect(await sessions.refresh(first.refreshToken, 3600)).toMatchObject({ kind: "reused" });
    expect(await sessions.find(first.sessionId)).toMatchObject({ revoked: true });
    expect(await sessions.refresh(newest, 3600)).toEqual({ kind: "revoked" });
  });

  it("lets only one of two concurrent refreshes with the same token rotate", async () => {
    const sessions = createSessionStore(db);
    const { refreshToken } = await sessions.create(userId, 3600);
    const outcomes = await Promise.all([
      sessions.refresh(refreshToken, 3600),
      sessions.refresh(refreshToken, 3600),
    ]);
    expect(outcomes.map((o) => o.kind).sort()).toEqual(["reused", "rotated"]);
  });

  it("refuses unknown and expired tokens", async () => {
    const sessions = createSessionStore(db);
    expect(await sessions.refresh("rt_nonsense", 3600)).toEqual({ kind: "unknown" });
    const { refreshToken, sessionId } = await sessions.create(userId, 3600);
    await db.query(
      "UPDATE refresh_tokens SET expires_at = now() - interval '1 second' WHERE session_id = $1",
      [sessionId],
    );
    expect(await sessions.refresh(refreshToken, 3600)).toEqual({ kind: "expired" });
  });

  it("revokes one session or all of a user's", async () => {
    const sessions = createSessionStore(db);
    const a = await sessions.create(userId, 3600);
    const b = await sessions.create(userId, 3600);
    expect(await sessions.revoke(a.sessionId, "logout")).toBe(true);
    expect(await sessions.revoke(a.sessionId, "logout")).toBe(false);
    const all = await sessions.revokeAll(userId, "logout_all");
    expect(all).toContain(b.sessionId);
    expect(all).not.toContain(a.sessionId);
    expect(await sessions.find(b.sessionId)).toMatchObject({ revoked: true, userId });
  });
});
