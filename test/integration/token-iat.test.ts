import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leewaySeconds } from "../../src/identity/tokens.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer, testSecret } from "../support/server.js";

/**
 * A token whose `iat` lies in the future (beyond the documented clock skew) is refused by a
 * real server, on validate and on a protected call, though its signature, `nbf` and `exp`
 * are fine.
 */

const password = "future issued lantern 1187";
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("ivy", password, ["viewer"]);
});
afterAll(async () => server?.close());

const decode = (part: string | undefined) =>
  JSON.parse(Buffer.from(part ?? "", "base64url").toString()) as Record<string, unknown>;

/** The same token re-signed with the server's secret, `iat` moved by `shiftSeconds`. */
async function withIatShifted(token: string, shiftSeconds: number): Promise<string> {
  const [h, p] = token.split(".");
  const header = decode(h);
  const claims = decode(p);
  return new SignJWT({ ...claims, iat: (claims.iat as number) + shiftSeconds })
    .setProtectedHeader({ alg: "HS256", kid: header.kid as string, typ: "JWT" })
    .sign(new TextEncoder().encode(testSecret));
}

async function validate(token: string) {
  const res = await fetch(`${server.url}/auth/validate`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await res.json()) as { valid: boolean; reason: string };
}

describe("iat in the future", () => {
  it("is refused beyond the clock skew, and accepted within it", async () => {
    const login = await callJson(server.url, "/auth/login", { username: "ivy", password });
    const token = login.body.token as string;
    const future = await withIatShifted(token, 3600);
    expect(await validate(future)).toEqual(
      expect.objectContaining({ valid: false, reason: "not_yet_valid" }),
    );
    const logout = await callJson(server.url, "/auth/logout", {}, { token: future });
    expect(logout.status).toBe(401);
    expect(logout.reason).toBe("NOT_YET_VALID");
    // Within the skew: a clock a little ahead is tolerated.
    const slightlyAhead = await withIatShifted(token, leewaySeconds - 5);
    expect(await validate(slightlyAhead)).toEqual(expect.objectContaining({ valid: true }));
  });
});
