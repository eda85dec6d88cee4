import { createHash, createPrivateKey, createPublicKey, randomUUID, webcrypto } from "node:crypto";
import {
  calculateJwkThumbprint,
  exportJWK,
  importPKCS8,
  type CryptoKey as JoseCryptoKey,
  type JWTPayload,
  jwtVerify,
  type KeyObject,
  SignJWT,
} from "jose";
import { isHmac, type JwtConfig } from "../config.js";

/**
 * Issues and verifies access tokens. Keys are imported once, at start; the
 * verifier accepts only the configured algorithm, so `alg: none` and
 * HMAC-with-the-public-key confusion fail before any signature check.
 */

export type TokenInvalidReason =
  | "missing"
  | "malformed"
  | "bad_signature"
  | "algorithm_not_allowed"
  | "expired"
  | "not_yet_valid"
  | "wrong_issuer"
  | "wrong_audience";

export interface AccessClaims {
  /** Claim `kind`: "service" for service-account tokens; absent (a person) otherwise. */
  kind: "user" | "service";
  /** The user's or service account's id (claim `sub`). */
  userId: string;
  /** The login session the token belongs to (claim `sid`); empty for service accounts. */
  sessionId: string;
  /** Claim `scope`: "mfa_enroll" restricts the token to MFA enrolment (MFA_REQUIRED). */
  scope: string | undefined;
  username: string;
  roles: string[];
  /** Expiry, seconds since the epoch. */
  exp: number;
  jti: string;
}

export type VerifyResult =
  | { ok: true; claims: AccessClaims }
  | { ok: false; reason: TokenInvalidReason };

export interface PublicJwk {
  kty: string;
  kid: string;
  use: string;
  alg: string;
  n?: string;
  e?: string;
  crv?: string;
  x?: string;
  y?: string;
}

export interface IssuedToken {
  token: string;
  expiresIn: number;
}

export interface TokenService {
  issue(
    subject:
      | {
          kind?: "user";
          id: string;
          username: string;
          roles: readonly string[];
          sessionId: string;
          scope?: string;
          /** Default: TOKEN_TTL_SECONDS. */
          ttlSeconds?: number;
        }
      | {
          kind: "service";
          id: string;
          username: string;
          roles: readonly string[];
          /** Service tokens are short-lived: their own lifetime, not TOKEN_TTL_SECONDS. */
          ttlSeconds: number;
        },
  ): Promise<IssuedToken>;
  verify(token: string): Promise<VerifyResult>;
  /** Public keys for /.well-known/jwks.json; empty for HMAC algorithms. */
  readonly jwks: readonly PublicJwk[];
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** Clock skew tolerated on exp, nbf and iat, in seconds (docs/identity.md, "Token claims"). */
export const leewaySeconds = 30;

/** How many verified tokens are remembered, so repeated validation skips the signature. */
const verifiedCacheSize = 10_000;

type VerifyKey = JoseCryptoKey | KeyObject;

interface KeyRing {
  signingKey: VerifyKey;
  signingKid: string;
  verifyKeys: Map<string, VerifyKey>;
  jwks: PublicJwk[];
}

const hmacHash = { HS256: "SHA-256", HS384: "SHA-384", HS512: "SHA-512" } as const;

async function importHmac(secret: string, alg: keyof typeof hmacHash): Promise<JoseCryptoKey> {
  return webcrypto.subtle.importKey(
    "raw",
    Buffer.from(secret),
    { name: "HMAC", hash: hmacHash[alg] },
    false,
    ["sign", "verify"],
  ) as Promise<JoseCryptoKey>;
}

/** A key id that names an HMAC secret without revealing it. */
function hmacKid(secret: string): string {
  return `hs-${createHash("sha256").update(secret).digest("base64url").slice(0, 16)}`;
}

async function loadKeyRing(cfg: JwtConfig): Promise<KeyRing> {
  const alg = cfg.algorithm;
  if (isHmac(alg)) {
    const hashAlg = alg as keyof typeof hmacHash;
    if (!cfg.secret) throw new Error("JWT_SECRET is required");
    const signingKey = await importHmac(cfg.secret, hashAlg);
    const verifyKeys = new Map<string, VerifyKey>([[hmacKid(cfg.secret), signingKey]]);
    for (const previous of cfg.previousSecrets) {
      verifyKeys.set(hmacKid(previous), await importHmac(previous, hashAlg));
    }
    return { signingKey, signingKid: hmacKid(cfg.secret), verifyKeys, jwks: [] };
  }
  if (!cfg.privateKeyPem) throw new Error("JWT_PRIVATE_KEY is required");
  const signingKey = await importPKCS8(cfg.privateKeyPem, alg);
  const publicKey = createPublicKey(createPrivateKey(cfg.privateKeyPem));
  const jwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(jwk);
  const published: PublicJwk = { kty: jwk.kty ?? "", kid, use: "sig", alg };
  for (const member of ["n", "e", "crv", "x", "y"] as const) {
    const value = jwk[member];
    if (typeof value === "string") published[member] = value;
  }
  return {
    signingKey,
    signingKid: kid,
    verifyKeys: new Map([[kid, publicKey]]),
    jwks: [published],
  };
}

class UnknownKeyError extends Error {}

function reasonOf(err: unknown): TokenInvalidReason {
  if (err instanceof UnknownKeyError) return "bad_signature";
  const code = (err as { code?: string }).code;
  switch (code) {
    case "ERR_JWT_EXPIRED":
      return "expired";
    case "ERR_JWT_CLAIM_VALIDATION_FAILED": {
      const claim = (err as { claim?: string }).claim;
      if (claim === "nbf") return "not_yet_valid";
      if (claim === "iss") return "wrong_issuer";
      if (claim === "aud") return "wrong_audience";
      return "malformed";
    }
    case "ERR_JWS_SIGNATURE_VERIFICATION_FAILED":
      return "bad_signature";
    case "ERR_JOSE_ALG_NOT_ALLOWED":
      return "algorithm_not_allowed";
    default:
      return "malformed";
  }
}

function claimsOf(payload: JWTPayload): AccessClaims | undefined {
  const { sub, exp, jti, sid, username, roles, scope, kind } = payload;
  if (typeof sub !== "string" || typeof exp !== "number" || typeof jti !== "string") {
    return undefined;
  }
  if (typeof username !== "string" || !Array.isArray(roles)) return undefined;
  if (!roles.every((r): r is string => typeof r === "string")) return undefined;
  if (scope !== undefined && typeof scope !== "string") return undefined;
  if (kind === "service") {
    // Service tokens belong to no session and carry no scope.
    if (sid !== undefined || scope !== undefined) return undefined;
    return { kind, userId: sub, sessionId: "", scope, username, roles, exp, jti };
  }
  // A user's token must name its session.
  if (kind !== undefined || typeof sid !== "string" || sid === "") return undefined;
  return { kind: "user", userId: sub, sessionId: sid, scope, username, roles, exp, jti };
}

export async function createTokenService(
  cfg: JwtConfig,
  clock: Clock = systemClock,
): Promise<TokenService> {
  const ring = await loadKeyRing(cfg);
  const verified = new Map<string, AccessClaims>();
  const verifyOptions = {
    algorithms: [cfg.algorithm],
    issuer: cfg.issuer,
    audience: cfg.audience,
    clockTolerance: leewaySeconds,
    requiredClaims: ["sub", "exp", "iat", "nbf", "jti"],
  };
  const keyFor = (header: { kid?: string }): VerifyKey => {
    const key = header.kid === undefined ? undefined : ring.verifyKeys.get(header.kid);
    if (key === undefined) throw new UnknownKeyError("no key with this kid");
    return key;
  };

  return {
    jwks: ring.jwks,
    async issue(subject) {
      const nowSeconds = Math.floor(clock.now() / 1000);
      const ttlSeconds = subject.ttlSeconds ?? cfg.ttlSeconds;
      const token = await new SignJWT({
        username: subject.username,
        roles: [...subject.roles],
        ...(subject.kind === "service"
          ? { kind: "service" }
          : { sid: subject.sessionId, ...(subject.scope ? { scope: subject.scope } : {}) }),
      })
        .setProtectedHeader({ alg: cfg.algorithm, kid: ring.signingKid, typ: "JWT" })
        .setIssuer(cfg.issuer)
        .setAudience(cfg.audience)
        .setSubject(subject.id)
        .setIssuedAt(nowSeconds)
        .setNotBefore(nowSeconds)
        .setExpirationTime(nowSeconds + ttlSeconds)
        .setJti(randomUUID())
        .sign(ring.signingKey);
      return { token, expiresIn: ttlSeconds };
    },
    async verify(token) {
      const nowMs = clock.now();
      const cached = verified.get(token);
      if (cached !== undefined) {
        if (nowMs < (cached.exp + leewaySeconds) * 1000) return { ok: true, claims: cached };
        verified.delete(token);
        return { ok: false, reason: "expired" };
      }
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(token, keyFor, {
          ...verifyOptions,
          currentDate: new Date(nowMs),
        }));
      } catch (err) {
        return { ok: false, reason: reasonOf(err) };
      }
      // jose checks `iat` only against a maximum age; a token issued in the future is refused
      // here, with the same clock skew as `nbf` (a clock running ahead, or a forged date).
      if (typeof payload.iat !== "number") return { ok: false, reason: "malformed" };
      if (payload.iat > nowMs / 1000 + leewaySeconds) return { ok: false, reason: "not_yet_valid" };
      const claims = claimsOf(payload);
      if (claims === undefined) return { ok: false, reason: "malformed" };
      if (verified.size >= verifiedCacheSize) {
        const oldest = verified.keys().next().value;
        if (oldest !== undefined) verified.delete(oldest);
      }
      verified.set(token, claims);
      return { ok: true, claims };
    },
  };
}
