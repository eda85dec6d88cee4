import { generateKeyPairSync } from "node:crypto";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import type { JwtConfig } from "../../src/config.js";
import { createTokenService, leewaySeconds } from "../../src/identity/tokens.js";

const secret = "k3Jd9s0Qm1Zx8Vb7Nc6Lp5Ow4Ie3Ru2Ty1";
const hsConfig: JwtConfig = {
  algorithm: "HS256",
  secret,
  previousSecrets: [],
  privateKeyPem: undefined,
  issuer: "traitgate",
  audience: "traitgate",
  ttlSeconds: 900,
  refreshTtlSeconds: 3600,
  sessionMaxLifetimeSeconds: 43_200,
  serviceTtlSeconds: 600,
};
const subject = {
  id: "3f1e6f0e-3a4b-4c1d-9e2f-0a1b2c3d4e5f",
  username: "alice",
  roles: ["viewer"],
  sessionId: "9d2c1b0a-1111-4222-8333-944455556666",
};

function fixedClock(ms: number) {
  return { now: () => ms };
}

function tamper(token: string): string {
  const [h, p, s] = token.split(".");
  const payload = JSON.parse(Buffer.from(p ?? "", "base64url").toString());
  payload.roles = ["admin"];
  return [h, Buffer.from(JSON.stringify(payload)).toString("base64url"), s].join(".");
}

describe("token service (HS256)", () => {
  it("issues a token with the documented header and claims, and verifies it", async () => {
    const tokens = await createTokenService(hsConfig);
    const { token, expiresIn } = await tokens.issue(subject);
    expect(expiresIn).toBe(900);
    const [header, payload] = token
      .split(".")
      .slice(0, 2)
      .map((part) => JSON.parse(Buffer.from(part, "base64url").toString()));
    expect(header).toMatchObject({ alg: "HS256", typ: "JWT" });
    expect(header.kid).toMatch(/^hs-/);
    expect(Object.keys(payload).sort()).toEqual(
      ["aud", "exp", "iat", "iss", "jti", "nbf", "roles", "sid", "sub", "username"].sort(),
    );
    const result = await tokens.verify(token);
    expect(result).toMatchObject({
      ok: true,
      claims: { userId: subject.id, username: "alice", sessionId: subject.sessionId },
    });
  });

  it("refuses a tampered payload", async () => {
    const tokens = await createTokenService(hsConfig);
    const { token } = await tokens.issue(subject);
    expect(await tokens.verify(tamper(token))).toEqual({ ok: false, reason: "bad_signature" });
  });

  it("refuses expired and not-yet-valid tokens beyond the leeway", async () => {
    const start = Date.UTC(2026, 0, 1);
    const issuer = await createTokenService(hsConfig, fixedClock(start));
    const { token } = await issuer.issue(subject);
    const later = await createTokenService(
      hsConfig,
      fixedClock(start + (900 + leewaySeconds + 1) * 1000),
    );
    expect(await later.verify(token)).toEqual({ ok: false, reason: "expired" });
    const earlier = await createTokenService(
      hsConfig,
      fixedClock(start - (leewaySeconds + 5) * 1000),
    );
    expect(await earlier.verify(token)).toEqual({ ok: false, reason: "not_yet_valid" });
    const withinLeeway = await createTokenService(hsConfig, fixedClock(start + (900 + 10) * 1000));
    expect((await withinLeeway.verify(token)).ok).toBe(true);
  });

  it("refuses a token issued (iat) further in the future than the clock skew", async () => {
    const now = Date.UTC(2026, 0, 1);
    const tokens = await createTokenService(hsConfig, fixedClock(now));
    const { token } = await tokens.issue(subject);
    const header = JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString());
    const nowSeconds = now / 1000;
    // Signed with the right key and otherwise valid now (nbf now, exp in 15 minutes).
    const withIat = (iat: number) =>
      new SignJWT({ username: "alice", roles: ["viewer"], sid: subject.sessionId })
        .setProtectedHeader({ alg: "HS256", kid: header.kid, typ: "JWT" })
        .setIssuer("traitgate")
        .setAudience("traitgate")
        .setSubject(subject.id)
        .setIssuedAt(iat)
        .setNotBefore(nowSeconds)
        .setExpirationTime(nowSeconds + 900)
        .setJti(crypto.randomUUID())
        .sign(new TextEncoder().encode(secret));
    expect(await tokens.verify(await withIat(nowSeconds + 3600))).toEqual({
      ok: false,
      reason: "not_yet_valid",
    });
    expect(await tokens.verify(await withIat(nowSeconds + leewaySeconds + 1))).toEqual({
      ok: false,
      reason: "not_yet_valid",
    });
    expect((await tokens.verify(await withIat(nowSeconds + leewaySeconds - 1))).ok).toBe(true);
    expect((await tokens.verify(await withIat(nowSeconds - 86_400))).ok).toBe(true);
  });

  it("a cached token still expires", async () => {
    let now = Date.UTC(2026, 0, 1);
    const tokens = await createTokenService(hsConfig, { now: () => now });
    const { token } = await tokens.issue(subject);
    expect((await tokens.verify(token)).ok).toBe(true);
    now += (900 + leewaySeconds + 1) * 1000;
    expect(await tokens.verify(token)).toEqual({ ok: false, reason: "expired" });
  });

  it("refuses alg none", async () => {
    const tokens = await createTokenService(hsConfig);
    const { token } = await tokens.issue(subject);
    const [, payload] = token.split(".");
    const none = `${Buffer.from(JSON.stringify({ alg: "none", typ: "JWT" })).toString("base64url")}.${payload}.`;
    expect(await tokens.verify(none)).toEqual({ ok: false, reason: "algorithm_not_allowed" });
  });

  it("refuses wrong issuer and wrong audience", async () => {
    const tokens = await createTokenService(hsConfig);
    const other = await createTokenService({ ...hsConfig, issuer: "someone-else" });
    expect(await tokens.verify((await other.issue(subject)).token)).toEqual({
      ok: false,
      reason: "wrong_issuer",
    });
    const otherAud = await createTokenService({ ...hsConfig, audience: "another-api" });
    expect(await tokens.verify((await otherAud.issue(subject)).token)).toEqual({
      ok: false,
      reason: "wrong_audience",
    });
  });

  it("refuses garbage and tokens signed with an unknown secret", async () => {
    const tokens = await createTokenService(hsConfig);
    expect(await tokens.verify("not-a-jwt")).toEqual({ ok: false, reason: "malformed" });
    expect(await tokens.verify("a.b.c")).toEqual({ ok: false, reason: "malformed" });
    const stranger = await createTokenService({
      ...hsConfig,
      secret: "Zq8Xw7Ce6Vr5Bt4Ny3Mu2Ki1Lo0Pa9Sd8Fg",
    });
    expect(await tokens.verify((await stranger.issue(subject)).token)).toEqual({
      ok: false,
      reason: "bad_signature",
    });
  });

  it("verifies tokens of a previous secret during rotation, and signs with the new one", async () => {
    const old = await createTokenService(hsConfig);
    const oldToken = (await old.issue(subject)).token;
    const newSecret = "Qw9Er8Ty7Ui6Op5As4Df3Gh2Jk1Lz0Xc9Vb";
    const rotated = await createTokenService({
      ...hsConfig,
      secret: newSecret,
      previousSecrets: [secret],
    });
    expect((await rotated.verify(oldToken)).ok).toBe(true);
    const notRotated = await createTokenService({ ...hsConfig, secret: newSecret });
    expect((await notRotated.verify(oldToken)).ok).toBe(false);
    expect((await old.verify((await rotated.issue(subject)).token)).ok).toBe(false);
  });

  it("publishes no JWKS for HMAC", async () => {
    expect((await createTokenService(hsConfig)).jwks).toEqual([]);
  });
});

describe.each([
  ["RS256", () => generateKeyPairSync("rsa", { modulusLength: 2048 }), "RSA"],
  ["ES256", () => generateKeyPairSync("ec", { namedCurve: "P-256" }), "EC"],
  ["EdDSA", () => generateKeyPairSync("ed25519"), "OKP"],
] as const)("token service (%s)", (algorithm, keys, kty) => {
  const { privateKey, publicKey } = keys();
  const config: JwtConfig = {
    ...hsConfig,
    algorithm,
    secret: undefined,
    privateKeyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
  };

  it("signs, verifies and publishes the public key", async () => {
    const tokens = await createTokenService(config);
    const { token } = await tokens.issue(subject);
    expect((await tokens.verify(token)).ok).toBe(true);
    expect(tokens.jwks).toHaveLength(1);
    expect(tokens.jwks[0]).toMatchObject({ kty, use: "sig", alg: algorithm });
    const header = JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString());
    expect(header.kid).toBe(tokens.jwks[0]?.kid);
  });

  it("refuses a token HMAC-signed with the public key (algorithm confusion)", async () => {
    const tokens = await createTokenService(config);
    const kid = tokens.jwks[0]?.kid ?? "";
    const pem = publicKey.export({ type: "spki", format: "pem" }).toString();
    const forged = await new SignJWT({ username: "mallory", roles: ["admin"] })
      .setProtectedHeader({ alg: "HS256", kid })
      .setIssuer("traitgate")
      .setAudience("traitgate")
      .setSubject(subject.id)
      .setIssuedAt()
      .setNotBefore("0s")
      .setExpirationTime("10m")
      .setJti("x")
      .sign(new TextEncoder().encode(pem));
    expect(await tokens.verify(forged)).toEqual({ ok: false, reason: "algorithm_not_allowed" });
  });
});

describe("service-account tokens", () => {
  const payloadOf = (token: string) =>
    JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString());

  it("carry kind service, no session, and their own short lifetime", async () => {
    const tokens = await createTokenService(hsConfig);
    const issued = await tokens.issue({
      kind: "service",
      id: subject.id,
      username: "ai-core",
      roles: ["service"],
      ttlSeconds: 120,
    });
    expect(issued.expiresIn).toBe(120);
    const payload = payloadOf(issued.token);
    expect(payload.kind).toBe("service");
    expect(payload.sid).toBeUndefined();
    expect(payload.exp - payload.iat).toBe(120);
    expect(await tokens.verify(issued.token)).toMatchObject({
      ok: true,
      claims: { kind: "service", userId: subject.id, sessionId: "" },
    });
  });

  it("a user token must name its session; a service token must not", async () => {
    const tokens = await createTokenService(hsConfig);
    const issued = (await tokens.issue(subject)).token;
    const { kid } = JSON.parse(Buffer.from(issued.split(".")[0] ?? "", "base64url").toString());
    // Correctly signed with the service's own key: only the claims differ.
    const sign = (claims: Record<string, unknown>) =>
      new SignJWT({ username: "svc", roles: [], ...claims })
        .setProtectedHeader({ alg: "HS256", kid })
        .setIssuer("traitgate")
        .setAudience("traitgate")
        .setSubject(subject.id)
        .setIssuedAt()
        .setNotBefore("0s")
        .setExpirationTime("5m")
        .setJti(`j-${Math.random()}`)
        .sign(new TextEncoder().encode(secret));
    const malformed = { ok: false, reason: "malformed" };
    expect(await tokens.verify(await sign({}))).toEqual(malformed);
    expect(await tokens.verify(await sign({ kind: "service", sid: "s1" }))).toEqual(malformed);
    expect(await tokens.verify(await sign({ kind: "robot", sid: "s1" }))).toEqual(malformed);
    expect((await tokens.verify(await sign({ sid: "s1" }))).ok).toBe(true);
    expect((await tokens.verify(await sign({ kind: "service" }))).ok).toBe(true);
  });
});
