import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { environmentValues } from "../../src/settings/effective.js";
import { containsMask, isMaskedEcho, maskSecret } from "../../src/settings/mask.js";
import { checkValue, definitionOf, settingDefinitions } from "../../src/settings/registry.js";
import { testDataKey, testSecret } from "../support/server.js";

const def = (key: string) => {
  const d = definitionOf(key);
  if (d === undefined) throw new Error(`no setting ${key}`);
  return d;
};

describe("settings registry", () => {
  it.each([
    ["port", 8080, true],
    ["port", 0, "OUT_OF_RANGE"],
    ["port", 65536, "OUT_OF_RANGE"],
    ["port", "8080", "WRONG_TYPE"],
    ["port", 1.5, "WRONG_TYPE"],
    ["log_level", "debug", true],
    ["log_level", "loud", "NOT_ALLOWED"],
    ["log_level", 1, "WRONG_TYPE"],
    ["auth.mfa_required", true, true],
    ["auth.mfa_required", "true", "WRONG_TYPE"],
    ["auth.token_ttl_seconds", 59, "OUT_OF_RANGE"],
    ["rag.top_k_default", 100, true],
    ["rag.top_k_default", 101, "OUT_OF_RANGE"],
    ["rag.plugin_id", "rag-db", true],
    ["rag.plugin_id", "Rag DB", "BAD_FORMAT"],
    ["data_source", "", true],
    ["data_source", "postgresql://a:b@h/d", true],
    ["data_source", "mysql://a@h/d", "BAD_FORMAT"],
    ["data_source", `postgres://${"x".repeat(2048)}`, "TOO_LONG"],
  ])("%s = %j → %s", (key, value, want) => {
    const result = checkValue(def(key), value);
    if (want === true) expect(result).toEqual({ ok: true, value });
    else expect(result).toMatchObject({ ok: false, problem: want });
  });

  it("has one entry per key, each default valid", () => {
    const keys = settingDefinitions.map((d) => d.key);
    expect(new Set(keys).size).toBe(keys.length);
    for (const d of settingDefinitions) expect(checkValue(d, d.default).ok).toBe(true);
  });

  it("takes environment values only for variables that are set", () => {
    const env = {
      JWT_SECRET: testSecret,
      DATA_ENCRYPTION_KEY: testDataKey,
      LOG_LEVEL: "warn",
      MFA_REQUIRED: "yes",
      TOKEN_TTL_SECONDS: "",
    };
    const values = environmentValues(loadConfig(env).config, env);
    expect(Object.fromEntries(values)).toEqual({ log_level: "warn", "auth.mfa_required": true });
  });
});

describe("masking", () => {
  it.each([
    ["postgres://app:pw@db/x", "postgres://app:****@db/x"],
    ["postgres://app@db/x", "postgres://app@db/x"],
    [
      "postgres://app:p%40ss@db:5432/x?sslmode=require&password=two",
      "postgres://app:****@db:5432/x?sslmode=require&password=****",
    ],
    ["not a url", "****"],
    ["", ""],
    // Ambiguous credentials are masked whole (fail closed): never a password in clear.
    ["postgres://app:se/cret@db/x", "****"],
    ["postgres://app:p#ss@db/x", "****"],
    ["postgres://app:p?ss@db/x", "****"],
    ["postgres://app:a@b@db/x", "****"],
    ["postgres://db/x?password=pw", "postgres://db/x?password=****"],
  ])("%s → %s", (value, masked) => {
    expect(maskSecret(value)).toBe(masked);
  });

  it("recognises the masked value sent back, and a mask in an edited value", () => {
    expect(isMaskedEcho("postgres://app:****@db/x", "postgres://app:pw@db/x")).toBe(true);
    expect(isMaskedEcho("****", "opaque")).toBe(true);
    expect(isMaskedEcho("postgres://app:****@other/x", "postgres://app:pw@db/x")).toBe(false);
    expect(isMaskedEcho("****", "")).toBe(false);
    expect(containsMask("postgres://app:****@other/x")).toBe(true);
  });
});
