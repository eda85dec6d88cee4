import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { demoKeyFiles, ensureDemoSigningKey } from "../../src/demo/keys.js";
import { callJson } from "../support/http.js";
import { startTestServer, testDataKey } from "../support/server.js";

/**
 * The demo signs with EdDSA, its key generated on the first run and kept in DATA_DIR (0600):
 * its JWKS is not empty, and a token it issued verifies with nothing but the JWKS fetched
 * from the URI its discovery document names, also once the issuer is gone.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-demo-jwt-"));
  dirs.push(dir);
  return dir;
}

describe("the demo's signing key", () => {
  it("is generated once in DATA_DIR with mode 0600 and kept across runs", () => {
    const dir = tempDir();
    const first: NodeJS.ProcessEnv = { DATA_DIR: dir };
    expect(ensureDemoSigningKey(first)).toContain(demoKeyFiles.JWT_PRIVATE_KEY);
    const file = join(dir, demoKeyFiles.JWT_PRIVATE_KEY);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(first.JWT_ALGORITHM).toBe("EdDSA");
    expect(first.JWT_PRIVATE_KEY).toBe(readFileSync(file, "utf8"));
    const second: NodeJS.ProcessEnv = { DATA_DIR: dir };
    ensureDemoSigningKey(second);
    expect(second.JWT_PRIVATE_KEY).toBe(first.JWT_PRIVATE_KEY);
    // What the demo then configures: EdDSA with that key, no generated HMAC secret.
    const { config, generated } = loadConfig(
      { ...second, DATA_ENCRYPTION_KEY: testDataKey },
      { demo: true },
    );
    expect(config.jwt.algorithm).toBe("EdDSA");
    expect(config.jwt.secret).toBeUndefined();
    expect(generated.join("\n")).not.toContain("JWT_SECRET");
  });

  it("is left alone when the operator chose how to sign", () => {
    for (const chosen of [
      { JWT_SECRET: "operator-secret-0123456789-abcdefghijklmn" },
      { JWT_ALGORITHM: "HS256" },
      { JWT_ALGORITHM: "ES256", JWT_PRIVATE_KEY: "-----BEGIN PRIVATE KEY-----" },
    ]) {
      const dir = tempDir();
      const env: NodeJS.ProcessEnv = { DATA_DIR: dir, ...chosen };
      expect(ensureDemoSigningKey(env)).toBeUndefined();
      expect(env).toEqual({ DATA_DIR: dir, ...chosen });
      expect(existsSync(join(dir, demoKeyFiles.JWT_PRIVATE_KEY))).toBe(false);
    }
  });

  it("signs tokens that verify offline through the JWKS its discovery document names", async () => {
    const env: NodeJS.ProcessEnv = { DATA_DIR: tempDir() };
    ensureDemoSigningKey(env);
    const server = await startTestServer({
      env: {
        JWT_SECRET: undefined,
        JWT_ALGORITHM: env.JWT_ALGORITHM,
        JWT_PRIVATE_KEY: env.JWT_PRIVATE_KEY,
      },
    });
    let verifyLater: string;
    let jwks: ReturnType<typeof createRemoteJWKSet>;
    const expected = { issuer: server.config.jwt.issuer, audience: server.config.jwt.audience };
    try {
      const discovery = (await (
        await fetch(`${server.url}/.well-known/openid-configuration`)
      ).json()) as { jwks_uri: string; id_token_signing_alg_values_supported: string[] };
      expect(discovery.id_token_signing_alg_values_supported).toEqual(["EdDSA"]);
      const published = (await (await fetch(discovery.jwks_uri)).json()) as {
        keys: { kty: string; crv: string; alg: string; d?: string }[];
      };
      expect(published.keys).toHaveLength(1);
      expect(published.keys[0]).toMatchObject({ kty: "OKP", crv: "Ed25519", alg: "EdDSA" });
      expect(published.keys[0]?.d).toBeUndefined();
      await server.createUser("offline", "offline-user-password", ["viewer"]);
      const login = (username: string) =>
        callJson(server.url, "/auth/login", { username, password: "offline-user-password" });
      jwks = createRemoteJWKSet(new URL(discovery.jwks_uri));
      const first = await jwtVerify((await login("offline")).body.token as string, jwks, {
        ...expected,
        algorithms: ["EdDSA"],
      });
      expect(first.payload.username).toBe("offline");
      verifyLater = (await login("offline")).body.token as string;
    } finally {
      await server.close();
    }
    // The issuer is gone: the key fetched once is all a verifier needs.
    const later = await jwtVerify(verifyLater, jwks, { ...expected, algorithms: ["EdDSA"] });
    expect(later.payload.username).toBe("offline");
  });
});
