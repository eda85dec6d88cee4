import type { Config } from "../config.js";
import { maxOrigins, parseOriginList } from "./origin-list.js";

/**
 * The one registry of platform settings. Adding a setting is one entry here:
 * its type and rules drive validation, masking, the definitions API, the
 * environment default and docs/settings.md (keep that page in step).
 */

export type SettingValue = string | number | boolean;

interface Common {
  key: string;
  description: string;
  /** Stored sealed (src/crypto/secret-box.ts), returned masked, audited as "****". */
  secret: boolean;
  /** A change takes effect only after a restart. */
  restartRequired: boolean;
  /**
   * The environment variable whose value replaces the default, and how to read it from the
   * validated configuration (src/config.ts parses and checks the variable).
   */
  env?: { variable: string; fromConfig: (config: Config) => SettingValue };
}

export type SettingDefinition = Common &
  (
    | { type: "integer"; default: number; min: number; max: number }
    | { type: "boolean"; default: boolean }
    | { type: "enum"; default: string; allowed: readonly string[] }
    | {
        type: "string";
        default: string;
        maxLength: number;
        /** What a non-empty value must look like, and the sentence saying so. */
        pattern?: { regex: RegExp; message: string };
        /** Checks a non-empty value further: the sentences saying what is wrong, or none. */
        check?: (value: string) => readonly string[];
      }
  );

export const settingDefinitions: readonly SettingDefinition[] = [
  {
    key: "port",
    type: "integer",
    default: 8080,
    min: 1,
    max: 65535,
    secret: false,
    restartRequired: true,
    description: "TCP port the core listens on for every protocol.",
    env: { variable: "PORT", fromConfig: (c) => c.port },
  },
  {
    key: "log_level",
    type: "enum",
    default: "info",
    allowed: ["debug", "info", "warn", "error"],
    secret: false,
    restartRequired: false,
    description: "Lowest level of log lines written; applies at once on every process.",
    env: { variable: "LOG_LEVEL", fromConfig: (c) => c.logLevel },
  },
  {
    key: "data_source",
    type: "string",
    default: "",
    maxLength: 2048,
    pattern: {
      regex: /^postgres(ql)?:\/\/\S+$/,
      message: "must be a postgres:// or postgresql:// URL, or empty",
    },
    secret: true,
    restartRequired: true,
    description:
      "Connection URL of the external data source searched by the core (not the platform's own database, DB_CONNECTION); empty for none.",
  },
  {
    key: "rag.backend",
    type: "enum",
    default: "builtin",
    allowed: ["builtin", "plugin"],
    secret: false,
    restartRequired: false,
    description: "Where retrieval runs: the built-in store or the plugin named by rag.plugin_id.",
  },
  {
    key: "rag.plugin_id",
    type: "string",
    default: "",
    maxLength: 64,
    pattern: {
      regex: /^[a-z0-9][a-z0-9_-]{0,63}$/,
      message: "must be a plugin id ([a-z0-9][a-z0-9_-]*), or empty",
    },
    secret: false,
    restartRequired: false,
    description: "The registered plugin that serves retrieval when rag.backend is plugin.",
  },
  {
    key: "rag.top_k_default",
    type: "integer",
    default: 5,
    min: 1,
    max: 100,
    secret: false,
    restartRequired: false,
    description: "Results a retrieval query returns when it does not say how many.",
  },
  {
    key: "auth.mfa_required",
    type: "boolean",
    default: false,
    secret: false,
    restartRequired: false,
    description: "MFA for every user: users without it get an enrolment-only token at login.",
    env: { variable: "MFA_REQUIRED", fromConfig: (c) => c.mfaRequired },
  },
  {
    key: "auth.token_ttl_seconds",
    type: "integer",
    default: 900,
    min: 60,
    max: 86_400,
    secret: false,
    restartRequired: false,
    description: "Lifetime of access tokens issued from now on, in seconds.",
    env: { variable: "TOKEN_TTL_SECONDS", fromConfig: (c) => c.jwt.ttlSeconds },
  },
  {
    key: "http.cors_allowed_origins",
    type: "string",
    default: "",
    maxLength: maxOrigins * 100,
    check: (value) => parseOriginList(value).problems,
    secret: false,
    restartRequired: false,
    description:
      "Web origins (scheme://host[:port], separated by commas) whose browser scripts may call the API across origins (CORS); empty for none.",
  },
];

const byKey = new Map(settingDefinitions.map((d) => [d.key, d]));

export function definitionOf(key: string): SettingDefinition | undefined {
  return byKey.get(key);
}

/** Why a value is refused, as a stable code. */
export type SettingProblem =
  | "UNKNOWN_SETTING"
  | "WRONG_TYPE"
  | "NOT_ALLOWED"
  | "OUT_OF_RANGE"
  | "TOO_LONG"
  | "BAD_FORMAT"
  | "MASKED_VALUE";

export interface Refusal {
  problem: SettingProblem;
  message: string;
}

/** The value itself, or why it is refused for this setting. Masked secrets are checked elsewhere. */
export function checkValue(
  def: SettingDefinition,
  value: unknown,
): { ok: true; value: SettingValue } | ({ ok: false } & Refusal) {
  const refuse = (problem: SettingProblem, message: string) =>
    ({ ok: false, problem, message }) as const;
  switch (def.type) {
    case "integer":
      if (typeof value !== "number" || !Number.isInteger(value)) {
        return refuse("WRONG_TYPE", "must be an integer");
      }
      if (value < def.min || value > def.max) {
        return refuse("OUT_OF_RANGE", `must be from ${def.min} to ${def.max}`);
      }
      return { ok: true, value };
    case "boolean":
      return typeof value === "boolean"
        ? { ok: true, value }
        : refuse("WRONG_TYPE", "must be true or false");
    case "enum":
      if (typeof value !== "string") return refuse("WRONG_TYPE", "must be a string");
      return def.allowed.includes(value)
        ? { ok: true, value }
        : refuse("NOT_ALLOWED", `must be one of ${def.allowed.join(", ")}`);
    case "string":
      if (typeof value !== "string") return refuse("WRONG_TYPE", "must be a string");
      if (value.length > def.maxLength) {
        return refuse("TOO_LONG", `must be at most ${def.maxLength} characters`);
      }
      if (value !== "" && def.pattern && !def.pattern.regex.test(value)) {
        return refuse("BAD_FORMAT", def.pattern.message);
      }
      if (value !== "" && def.check) {
        const problems = def.check(value);
        if (problems.length > 0) return refuse("BAD_FORMAT", problems.join("; "));
      }
      return { ok: true, value };
  }
}
