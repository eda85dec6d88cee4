import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

const password = "sessions-password-long";
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("sam", password);
});
afterAll(async () => server?.close());

interface Tokens {
  token: string;
  refresh_token: string;
  refresh_expires_in: number;
}

const post = (path: string, body: unknown, token?: string) =>
  callJson(server.url, path, body, { token });

const login = async () =>
  (await post("/auth/login", { username: "sam", password })).body as unknown as Tokens;
const refresh = (refreshToken: string) => post("/auth/refresh", { refresh_token: refreshToken });
const reasonOf = (body: Record<string, unknown>) =>
  (body.details as { reason?: string }[] | undefined)?.[0]?.reason;

async function validate(token: string) {
  const res = await fetch(`${server.url}/auth/validate`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.json()) as { valid: boolean; reason: string };
}

describe("sessions: refresh, rotation, reuse, logout", () => {
  it("returns a refresh token at login and rotates it on refresh", async () => {
    const first = await login();
    expect(first.refresh_token).toMatch(/^rt_/);
    // REFRESH_TOKEN_TTL_SECONDS (7 days), capped by the session's lifetime (12 hours).
    expect(first.refresh_expires_in).toBe(43_200);
    const rotated = await refresh(first.refresh_token);
    expect(rotated.status).toBe(200);
    const next = rotated.body as unknown as Tokens;
    expect(next.refresh_token).not.toBe(first.refresh_token);
    expect((await validate(next.token)).valid).toBe(true);
  });

  it("revokes the whole session when a used refresh token comes back", async () => {
    const first = await login();
    const second = (await refresh(first.refresh_token)).body as unknown as Tokens;
    const reuse = await refresh(first.refresh_token);
    expect(reuse.status).toBe(401);
    expect(reasonOf(reuse.body)).toBe("REFRESH_TOKEN_REUSED");
    const newest = await refresh(second.refresh_token);
    expect(newest.status).toBe(401);
    expect(reasonOf(newest.body)).toBe("INVALID_REFRESH_TOKEN");
    expect(await validate(second.token)).toEqual(
      expect.objectContaining({ valid: false, reason: "revoked" }),
    );
    expect(await validate(first.token)).toEqual(
      expect.objectContaining({ valid: false, reason: "revoked" }),
    );
  });

  it("refuses an unknown refresh token and a missing one", async () => {
    expect(reasonOf((await refresh("rt_not-a-real-token")).body)).toBe("INVALID_REFRESH_TOKEN");
    const missing = await post("/auth/refresh", {});
    expect(missing.status).toBe(400);
  });

  it("logout revokes the caller's session at once, and needs a token", async () => {
    const a = await login();
    const b = await login();
    expect((await post("/auth/logout", {})).status).toBe(401);
    expect((await post("/auth/logout", {}, a.token)).status).toBe(200);
    expect(await validate(a.token)).toEqual(
      expect.objectContaining({ valid: false, reason: "revoked" }),
    );
    expect(reasonOf((await refresh(a.refresh_token)).body)).toBe("INVALID_REFRESH_TOKEN");
    expect((await validate(b.token)).valid).toBe(true);
  });

  it("logout-all revokes every session of the user", async () => {
    const a = await login();
    const b = await login();
    const res = await post("/auth/logout-all", {}, a.token);
    expect(res.status).toBe(200);
    expect(res.body.sessions_revoked as number).toBeGreaterThanOrEqual(2);
    expect((await validate(a.token)).valid).toBe(false);
    expect((await validate(b.token)).valid).toBe(false);
  });

  it("keeps refresh tokens out of the logs", async () => {
    const a = await login();
    await refresh(a.refresh_token);
    await refresh(a.refresh_token);
    expect(server.logs.join("")).not.toContain(a.refresh_token);
    expect(server.logs.join("")).toContain("refresh_token_reused");
  });
});
