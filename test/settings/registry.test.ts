import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { environmentValues } from "../../src/settings/effective.js";
import { containsMask, isMaskedEcho, maskSecret } from "../../src/settings/mask.js";
import { parseOriginList } from "../../src/settings/origin-list.js";
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
    ["http.cors_allowed_origins", "", true],
    ["http.cors_allowed_origins", "https://app.example.com", true],
    [
      "http.cors_allowed_origins",
      "https://a.example.com, http://localhost:5173\nhttp://[::1]:8081",
      true,
    ],
    ["http.cors_allowed_origins", "https://xn--bcher-kva.example", true],
    ["http.cors_allowed_origins", "*", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "null", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "https://app.example.com/", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "https://app.example.com/x", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "https://APP.example.com", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "http://app.example.com:80", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "https://bücher.example", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "https://u:p@app.example.com", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "file:///tmp", "BAD_FORMAT"],
    ["http.cors_allowed_origins", "app.example.com", "BAD_FORMAT"],
    ["http.cors_allowed_origins", ["https://app.example.com"], "WRONG_TYPE"],
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

describe("http.cors_allowed_origins", () => {
  it("names each bad entry and the spelling a browser sends", () => {
    const result = checkValue(
      def("http.cors_allowed_origins"),
      "https://ok.example, https://App.example.com:443/, *",
    );
    expect(result).toMatchObject({ ok: false, problem: "BAD_FORMAT" });
    const message = result.ok ? "" : result.message;
    expect(message).toContain('"https://App.example.com:443/"');
    expect(message).toContain("write https://app.example.com");
    expect(message).toContain('"*" is not accepted');
    expect(message).not.toContain("ok.example");
  });

  it("keeps each origin once and refuses more than 100", () => {
    expect(
      parseOriginList("https://a.example https://a.example,https://b.example").origins,
    ).toEqual(["https://a.example", "https://b.example"]);
    const many = Array.from({ length: 101 }, (_, i) => `https://h${i}.example`).join(",");
    expect(checkValue(def("http.cors_allowed_origins"), many)).toMatchObject({
      ok: false,
      problem: "BAD_FORMAT",
    });
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
