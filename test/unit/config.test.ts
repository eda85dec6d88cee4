import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";

const good = {
  JWT_SECRET: "k3Jd9s0Qm1Zx8Vb7Nc6Lp5Ow4Ie3Ru2Ty1",
  DATA_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString("base64"),
};

function problemsOf(env: NodeJS.ProcessEnv): readonly string[] {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("configuration", () => {
  it("has the documented defaults", () => {
    const { config } = loadConfig(good);
    expect(config).toMatchObject({
      port: 8080,
      dataDir: "./data",
      dbConnection: undefined,
      logLevel: "info",
      mfaRequired: false,
      jwt: { algorithm: "HS256", issuer: "traitgate", audience: "traitgate", ttlSeconds: 900 },
      gateway: {
        allowedHosts: ["127.0.0.1", "localhost", "::1"],
        defaultTimeoutMs: 10_000,
        maxTimeoutMs: 60_000,
      },
    });
  });

  it("reads the operator lane's host list and deadlines", () => {
    const { config } = loadConfig({
      ...good,
      PLUGIN_ALLOWED_HOSTS: " rag.internal, 10.0.0.5 ,",
      GATEWAY_TIMEOUT_MS: "2000",
    });
    expect(config.gateway).toEqual({
      allowedHosts: ["rag.internal", "10.0.0.5"],
      defaultTimeoutMs: 2000,
      maxTimeoutMs: 60_000,
    });
    expect(problemsOf({ ...good, GATEWAY_MAX_TIMEOUT_MS: "5" }).join("\n")).toContain(
      "GATEWAY_MAX_TIMEOUT_MS",
    );
    expect(
      problemsOf({ ...good, PLUGIN_ALLOWED_HOSTS: "10.0.0.0/8,fd00::/8,169.254.169.254,rag_db" }),
    ).toEqual([
      "PLUGIN_ALLOWED_HOSTS: 169.254.169.254 is a cloud metadata address: never allowed",
      "PLUGIN_ALLOWED_HOSTS: rag_db is not a host name, IP address or CIDR range (10.0.0.0/8, fc00::/7)",
    ]);
  });

  it("reads the listener's connection caps and timeouts, with bounded defaults", () => {
    const defaults = loadConfig(good).config.listener;
    expect(defaults.http1.headersTimeoutMs + defaults.http1.checkIntervalMs).toBeLessThanOrEqual(
      30_000,
    );
    expect(defaults.h2IdleTimeoutMs).toBeLessThanOrEqual(300_000);
    expect(defaults.connections.max).toBeGreaterThan(0);
    expect(defaults.connections.maxPerAddress).toBeGreaterThan(0);
    const { config } = loadConfig({
      ...good,
      MAX_CONNECTIONS: "500",
      MAX_CONNECTIONS_PER_ADDRESS: "0",
      HTTP2_IDLE_TIMEOUT_MS: "30000",
      HTTP1_HEADERS_TIMEOUT_MS: "10000",
    });
    expect(config.listener).toMatchObject({
      connections: { max: 500, maxPerAddress: 0 },
      h2IdleTimeoutMs: 30_000,
      http1: { headersTimeoutMs: 10_000 },
    });
    const problems = problemsOf({
      ...good,
      MAX_CONNECTIONS: "0",
      MAX_CONNECTIONS_PER_ADDRESS: "-1",
      HTTP2_IDLE_TIMEOUT_MS: "10",
      HTTP1_HEADERS_TIMEOUT_MS: "600000",
    }).join("\n");
    for (const name of [
      "MAX_CONNECTIONS ",
      "MAX_CONNECTIONS_PER_ADDRESS",
      "HTTP2_IDLE_TIMEOUT_MS",
      "HTTP1_HEADERS_TIMEOUT_MS",
    ]) {
      expect(problems).toContain(name);
    }
  });

  it("reads a session's absolute lifetime, 12 hours by default, within its bounds", () => {
    expect(loadConfig(good).config.jwt.sessionMaxLifetimeSeconds).toBe(43_200);
    const { config } = loadConfig({ ...good, SESSION_MAX_LIFETIME_SECONDS: "3600" });
    expect(config.jwt.sessionMaxLifetimeSeconds).toBe(3600);
    for (const value of ["60", "7776001", "soon"]) {
      expect(problemsOf({ ...good, SESSION_MAX_LIFETIME_SECONDS: value }).join("\n")).toContain(
        "SESSION_MAX_LIFETIME_SECONDS",
      );
    }
  });

  it("bounds every wait for the database: 2 s a statement, 1 s for a connection by default", () => {
    expect(loadConfig(good).config.database).toEqual({
      statementTimeoutMs: 2_000,
      acquireTimeoutMs: 1_000,
    });
    const { config } = loadConfig({
      ...good,
      DB_STATEMENT_TIMEOUT_MS: "500",
      DB_ACQUIRE_TIMEOUT_MS: "750",
    });
    expect(config.database).toEqual({ statementTimeoutMs: 500, acquireTimeoutMs: 750 });
    const problems = problemsOf({
      ...good,
      DB_STATEMENT_TIMEOUT_MS: "0",
      DB_ACQUIRE_TIMEOUT_MS: "soon",
    }).join("\n");
    expect(problems).toContain("DB_STATEMENT_TIMEOUT_MS");
    expect(problems).toContain("DB_ACQUIRE_TIMEOUT_MS");
  });

  it.each([
    ["missing", {}],
    ["too short", { JWT_SECRET: "short-but-random-x9" }],
    ["a placeholder", { JWT_SECRET: "please-change-this-secret-in-production" }],
    ["a repeated character", { JWT_SECRET: "a".repeat(40) }],
  ])("refuses a JWT_SECRET that is %s, naming the variable", (_, env) => {
    expect(problemsOf(env).join("\n")).toContain("JWT_SECRET");
  });

  it("reports every problem at once", () => {
    const problems = problemsOf({
      JWT_ALGORITHM: "HS999",
      PORT: "70000",
      LOG_LEVEL: "loud",
      DB_CONNECTION: "mysql://x",
      TLS_CERT_FILE: "/tmp/cert.pem",
      MFA_REQUIRED: "maybe",
      DATA_ENCRYPTION_KEY: "abc",
    });
    const text = problems.join("\n");
    for (const name of [
      "JWT_ALGORITHM",
      "PORT",
      "LOG_LEVEL",
      "DB_CONNECTION",
      "TLS_CERT_FILE",
      "MFA_REQUIRED",
      "DATA_ENCRYPTION_KEY",
    ]) {
      expect(text).toContain(name);
    }
  });

  it("requires a data encryption key of 32 bytes, naming the variable", () => {
    expect(problemsOf({ JWT_SECRET: good.JWT_SECRET }).join()).toContain("DATA_ENCRYPTION_KEY");
    expect(problemsOf({ ...good, DATA_ENCRYPTION_KEY: "c2hvcnQ=" }).join()).toContain(
      "DATA_ENCRYPTION_KEY",
    );
    expect(problemsOf({ ...good, DATA_ENCRYPTION_KEY_PREVIOUS: "c2hvcnQ=" }).join()).toContain(
      "DATA_ENCRYPTION_KEY_PREVIOUS",
    );
    expect(loadConfig(good).config.dataKeys.current.id).toMatch(/^[A-Za-z0-9_-]{11}$/);
  });

  it("requires a private key for asymmetric algorithms", () => {
    expect(problemsOf({ JWT_ALGORITHM: "RS256" }).join()).toContain("JWT_PRIVATE_KEY");
  });

  it("generates a missing secret in demo mode and says so without printing it", () => {
    const { config, generated } = loadConfig(
      { DATA_ENCRYPTION_KEY: good.DATA_ENCRYPTION_KEY },
      { demo: true },
    );
    expect(config.jwt.secret?.length).toBeGreaterThanOrEqual(32);
    expect(generated.join()).toContain("JWT_SECRET");
    expect(generated.join()).not.toContain(config.jwt.secret);
  });

  it("binds every interface when serving, loopback in demo mode, unless HOST says otherwise", () => {
    expect(loadConfig(good).config.host).toBe("0.0.0.0");
    expect(loadConfig(good, { demo: true }).config.host).toBe("127.0.0.1");
    expect(loadConfig({ ...good, HOST: "0.0.0.0" }, { demo: true }).config.host).toBe("0.0.0.0");
    expect(loadConfig({ ...good, HOST: "10.1.2.3" }).config.host).toBe("10.1.2.3");
  });

  it("reads rotation secrets and never accepts short ones", () => {
    const prev = "Qw9Er8Ty7Ui6Op5As4Df3Gh2Jk1Lz0Xc9Vb";
    expect(
      loadConfig({ ...good, JWT_SECRET_PREVIOUS: ` ${prev} ,` }).config.jwt.previousSecrets,
    ).toEqual([prev]);
    expect(problemsOf({ ...good, JWT_SECRET_PREVIOUS: "short" }).join()).toContain(
      "JWT_SECRET_PREVIOUS",
    );
  });
});
