import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";
import { checkMetricsAccess, isLoopbackAddress } from "../../src/metrics/endpoint.js";

/**
 * Who may read /metrics, by the client's address as the socket gives it (the integration
 * suite, test/integration/metrics.test.ts, cannot connect from a non-loopback address on
 * this machine), and the configuration that decides it.
 */

const request = (remoteAddress: string, headers: Record<string, string> = {}) => ({
  headers,
  socket: { remoteAddress },
});

describe("the default: loopback clients only", () => {
  const access = { public: false, token: undefined };

  it.each([
    ["127.0.0.1", true],
    ["127.0.0.2", true],
    ["127.255.0.9", true],
    ["::1", true],
    ["::ffff:127.0.0.1", true],
    ["10.0.0.5", false],
    ["192.168.1.20", false],
    ["203.0.113.7", false],
    ["::ffff:10.0.0.5", false],
    ["2001:db8::1", false],
    ["::", false],
    ["1127.0.0.1", false],
    ["127.0.0.1.example", false],
  ])("%s is loopback: %s", (address, loopback) => {
    expect(isLoopbackAddress(address)).toBe(loopback);
    const refusal = checkMetricsAccess(access, request(address));
    if (loopback) expect(refusal).toBeUndefined();
    else expect(refusal).toMatchObject({ status: 403, reason: "METRICS_LOOPBACK_ONLY" });
  });

  it("refuses a socket without an address, and a loopback request a proxy relayed", () => {
    expect(checkMetricsAccess(access, { headers: {}, socket: {} })?.status).toBe(403);
    expect(
      checkMetricsAccess(access, request("127.0.0.1", { "x-forwarded-for": "203.0.113.7" }))
        ?.status,
    ).toBe(403);
  });
});

describe("METRICS_PUBLIC and METRICS_TOKEN", () => {
  it("public: any address", () => {
    expect(checkMetricsAccess({ public: true, token: undefined }, request("203.0.113.7"))).toBe(
      undefined,
    );
  });

  it("a token: whoever sends it, from anywhere; nobody without it, loopback included", () => {
    const access = { public: false, token: "a-metrics-token-of-some-length" };
    const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
    expect(checkMetricsAccess(access, request("203.0.113.7", bearer(access.token)))).toBe(
      undefined,
    );
    for (const headers of [
      {},
      bearer("a-metrics-token-of-some-lengt"),
      { authorization: access.token },
    ]) {
      expect(checkMetricsAccess(access, request("127.0.0.1", headers))).toMatchObject({
        status: 401,
        reason: "METRICS_TOKEN_REQUIRED",
      });
    }
  });
});

describe("metrics configuration", () => {
  const good = {
    JWT_SECRET: "k3Jd9s0Qm1Zx8Vb7Nc6Lp5Ow4Ie3Ru2Ty1",
    DATA_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString("base64"),
  };
  const problems = (env: NodeJS.ProcessEnv) => {
    try {
      loadConfig({ ...good, ...env });
      return [];
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
  };

  it("defaults to the main port, loopback clients only", () => {
    expect(loadConfig(good).config.metrics).toEqual({
      port: undefined,
      host: "127.0.0.1",
      public: false,
      token: undefined,
    });
    expect(
      loadConfig({
        ...good,
        METRICS_PORT: "9464",
        METRICS_HOST: "0.0.0.0",
        METRICS_TOKEN: "0123456789abcdef0123",
      }).config.metrics,
    ).toEqual({ port: 9464, host: "0.0.0.0", public: false, token: "0123456789abcdef0123" });
  });

  it("names every bad value, never repeating a token", () => {
    const found = problems({
      METRICS_PORT: "70000",
      METRICS_PUBLIC: "maybe",
      METRICS_TOKEN: "short-secret",
    });
    expect(found).toEqual([
      'METRICS_PORT must be an integer from 0 to 65535 (got "70000")',
      'METRICS_PUBLIC must be true or false (got "maybe")',
      "METRICS_TOKEN must be at least 16 bytes long",
    ]);
    expect(problems({ METRICS_PORT: "8080" })).toEqual([
      "METRICS_PORT must differ from PORT (unset it to serve /metrics on PORT)",
    ]);
    expect(problems({ PORT: "9000", METRICS_PORT: "8080" })).toEqual([]);
    expect(problems({ METRICS_HOST: "0.0.0.0" })).toEqual([
      "METRICS_HOST needs METRICS_PORT (without it, /metrics is on the main port)",
    ]);
  });
});
