import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { type CheckpointKeys, checkpointKeysFrom } from "./audit/checkpoint-keys.js";
import { type DataKeys, parseDataKeys } from "./crypto/secret-box.js";
import { parseAllowedHosts } from "./gateway/host-policy.js";
import type { LogLevel } from "./log.js";
import { type LogFileConfig, logFileConfig } from "./log-handlers.js";
import { type MetricsConfig, metricsConfig } from "./metrics/config.js";
import { type ListenerLimits, listenerDefaults } from "./server/limits.js";
import { parseTrustedProxies } from "./server/origin.js";

/**
 * Configuration comes from the environment only (secrets included). Each
 * problem is collected, so that a bad start reports all of them at once.
 */

export const jwtAlgorithms = ["HS256", "HS384", "HS512", "RS256", "ES256", "EdDSA"] as const;
export type JwtAlgorithm = (typeof jwtAlgorithms)[number];
export const isHmac = (alg: JwtAlgorithm): boolean => alg.startsWith("HS");

export interface JwtConfig {
  algorithm: JwtAlgorithm;
  /** HS*: the signing secret (≥ 32 bytes). */
  secret: string | undefined;
  /** HS*: older secrets that still verify during a rotation. */
  previousSecrets: string[];
  /** RS256/ES256/EdDSA: PKCS#8 PEM private key. */
  privateKeyPem: string | undefined;
  issuer: string;
  audience: string;
  ttlSeconds: number;
  /** Lifetime of refresh tokens (each is single-use; rotation issues the next). */
  refreshTtlSeconds: number;
  /** A session's absolute lifetime from its login: refresh stops working after it. */
  sessionMaxLifetimeSeconds: number;
  /** Lifetime of service-account tokens (client credentials): short, there is no revocation list. */
  serviceTtlSeconds: number;
}

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  dbConnection: string | undefined;
  /** PostgreSQL waits (docs/architecture.md, "When the database does not answer"). */
  database: {
    /** DB_STATEMENT_TIMEOUT_MS: the longest a statement may take, on the server and here. */
    statementTimeoutMs: number;
    /** DB_ACQUIRE_TIMEOUT_MS: the longest wait for a pooled or new connection. */
    acquireTimeoutMs: number;
  };
  logLevel: LogLevel;
  /** LOG_FILE and its rotation: a file handler beside the console (docs/operations.md). */
  logFile: LogFileConfig | undefined;
  /** Where /metrics is served and who may read it (docs/operations.md). */
  metrics: MetricsConfig;
  tls: { certFile: string; keyFile: string } | undefined;
  jwt: JwtConfig;
  mfaRequired: boolean;
  /** Keys for secrets at rest (docs/encryption.md). */
  dataKeys: DataKeys;
  /** Largest request body accepted on any protocol. */
  maxBodyBytes: number;
  /** Connection caps and timeouts of the listener (docs/architecture.md). */
  listener: ListenerLimits;
  /**
   * TRUSTED_PROXIES: IP addresses and CIDR ranges of proxies whose X-Forwarded-For names the
   * client (src/server/origin.ts); empty: the TCP peer is the client.
   */
  trustedProxies: string[];
  /** The operator lane (docs/operator-lane.md). */
  gateway: {
    /** PLUGIN_ALLOWED_HOSTS: hosts plugin manifests may name without an explicit exception. */
    allowedHosts: string[];
    /** GATEWAY_TIMEOUT_MS: a call's deadline when the caller sends none. */
    defaultTimeoutMs: number;
    /** GATEWAY_MAX_TIMEOUT_MS: the longest deadline a caller may ask for. */
    maxTimeoutMs: number;
  };
  /** Signed checkpoints of the audit log (docs/audit.md, "Checkpoints"). */
  auditCheckpoints: {
    /** AUDIT_CHECKPOINT_KEY, _KEY_PREVIOUS, _PUBLIC_KEYS. */
    keys: CheckpointKeys;
    /** AUDIT_CHECKPOINT_INTERVAL_SECONDS: between checkpoints (0: on shutdown only). */
    intervalSeconds: number;
  };
  /** The admin console (docs/console.md). */
  console: {
    /** CONSOLE_IDLE_TIMEOUT_SECONDS: a console session unused this long ends. */
    idleTimeoutSeconds: number;
  };
}

export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/** Values that documentation and tutorials put in JWT_SECRET; never accepted. */
const placeholderSecrets = new Set(
  [
    "secret",
    "changeme",
    "change-me",
    "change_me",
    "changethis",
    "your-secret-key",
    "your_secret_key",
    "your-256-bit-secret",
    "jwt_secret",
    "jwt-secret",
    "supersecret",
    "super-secret",
    "placeholder",
    "default",
    "replace-me",
    "please-change-this-secret-in-production",
    "your-secret-key-change-in-production",
  ].map((s) => s.toLowerCase()),
);

function looksLikePlaceholder(secret: string): boolean {
  const s = secret.trim().toLowerCase();
  if (placeholderSecrets.has(s)) return true;
  if (/change.?me|change.?this|placeholder|your.?secret|replace.?me|example/.test(s)) return true;
  // One character repeated (e.g. "aaaa…") is not a secret.
  return new Set(s).size < 4;
}

export const logLevels = ["debug", "info", "warn", "error"] as const;

export interface LoadOptions {
  /** Demo mode generates a missing JWT secret instead of refusing to start. */
  demo?: boolean;
}

export interface LoadedConfig {
  config: Config;
  /** Human-readable notes on generated values (demo mode); never the values. */
  generated: string[];
}

function intVar(
  env: NodeJS.ProcessEnv,
  name: string,
  fallback: number,
  min: number,
  max: number,
  problems: string[],
): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
    return fallback;
  }
  return n;
}

function boolVar(env: NodeJS.ProcessEnv, name: string, problems: string[]): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === "") return false;
  if (["true", "1", "yes"].includes(raw)) return true;
  if (["false", "0", "no"].includes(raw)) return false;
  problems.push(`${name} must be true or false (got "${env[name]}")`);
  return false;
}

/** PLUGIN_ALLOWED_HOSTS: host names, IP addresses and CIDR ranges (docs/operator-lane.md). */
function pluginAllowedHosts(env: NodeJS.ProcessEnv, problems: string[]): string[] {
  const entries = (env.PLUGIN_ALLOWED_HOSTS ?? "127.0.0.1,localhost,::1")
    .split(",")
    .map((h) => h.trim().toLowerCase())
    .filter((h) => h !== "");
  problems.push(...parseAllowedHosts(entries).problems);
  return entries;
}

/** TRUSTED_PROXIES: comma-separated IP addresses and CIDR ranges (docs/audit.md). */
function trustedProxies(env: NodeJS.ProcessEnv, problems: string[]): string[] {
  const entries = (env.TRUSTED_PROXIES ?? "")
    .split(",")
    .map((e) => e.trim())
    .filter((e) => e !== "");
  const parsed = parseTrustedProxies(entries);
  problems.push(...parsed.problems);
  return [...parsed.proxies.entries];
}

/** Reads and validates the configuration; throws ConfigError listing every problem. */
/** Where the embedded database keeps its files: a folder of DATA_DIR. */
export const embeddedDatabaseDir = (config: Pick<Config, "dataDir">): string =>
  join(config.dataDir, "pglite");

function listenerLimits(env: NodeJS.ProcessEnv, problems: string[]): ListenerLimits {
  const d = listenerDefaults;
  return {
    http1: {
      ...d.http1,
      headersTimeoutMs: intVar(
        env,
        "HTTP1_HEADERS_TIMEOUT_MS",
        d.http1.headersTimeoutMs,
        1000,
        60_000,
        problems,
      ),
    },
    h2IdleTimeoutMs: intVar(
      env,
      "HTTP2_IDLE_TIMEOUT_MS",
      d.h2IdleTimeoutMs,
      1000,
      3_600_000,
      problems,
    ),
    connections: {
      max: intVar(env, "MAX_CONNECTIONS", d.connections.max, 1, 1_000_000, problems),
      maxPerAddress: intVar(
        env,
        "MAX_CONNECTIONS_PER_ADDRESS",
        d.connections.maxPerAddress,
        0,
        1_000_000,
        problems,
      ),
    },
  };
}

export function loadConfig(env: NodeJS.ProcessEnv, options: LoadOptions = {}): LoadedConfig {
  const { config, dataKeys, problems, generated } = readConfig(env, options, true);
  if (problems.length > 0 || dataKeys === undefined) throw new ConfigError(problems);
  return { config: { ...config, dataKeys }, generated };
}

/**
 * The configuration of a one-shot command (users create, apikeys create, audit verify, …):
 * none of them signs a token, so JWT_* is neither required nor checked; DATA_ENCRYPTION_KEY
 * is required only when the command seals or opens secrets (`usesDataKeys`).
 */
export type CommandConfig = Omit<Config, "dataKeys"> & { dataKeys: DataKeys | undefined };

export function loadCommandConfig(
  env: NodeJS.ProcessEnv,
  options: { usesDataKeys: boolean },
): CommandConfig {
  const { config, dataKeys, problems } = readConfig(env, {}, false);
  if (options.usesDataKeys && dataKeys === undefined && problems.length === 0) {
    problems.push(dataKeyRequired);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return { ...config, dataKeys };
}

const dataKeyRequired =
  "DATA_ENCRYPTION_KEY is required (32 random bytes, base64: openssl rand -base64 32)";

/**
 * Reads every setting, collecting problems. `serving`: the process serves (JWT_* and
 * DATA_ENCRYPTION_KEY are required); otherwise JWT_* is skipped and a missing
 * DATA_ENCRYPTION_KEY is left for the caller to judge.
 */
function readConfig(env: NodeJS.ProcessEnv, options: LoadOptions, serving: boolean) {
  const problems: string[] = [];
  const generated: string[] = [];
  const jwtProblems: string[] = [];

  const algorithm = (env.JWT_ALGORITHM?.trim() || "HS256") as JwtAlgorithm;
  if (!jwtAlgorithms.includes(algorithm)) {
    jwtProblems.push(
      `JWT_ALGORITHM must be one of ${jwtAlgorithms.join(", ")} (got "${algorithm}")`,
    );
  }

  let secret = env.JWT_SECRET || undefined;
  let privateKeyPem = env.JWT_PRIVATE_KEY || undefined;
  if (isHmac(algorithm)) {
    if (secret === undefined && options.demo) {
      secret = randomBytes(48).toString("base64url");
      generated.push("JWT_SECRET was not set: a random one was generated for this run only");
    }
    if (secret === undefined) {
      jwtProblems.push(
        `JWT_SECRET is required for ${algorithm} (at least 32 bytes of random data)`,
      );
    } else if (Buffer.byteLength(secret) < 32) {
      jwtProblems.push("JWT_SECRET must be at least 32 bytes long");
    } else if (looksLikePlaceholder(secret)) {
      jwtProblems.push(
        "JWT_SECRET is a placeholder value; set a random secret of at least 32 bytes",
      );
    }
  } else if (privateKeyPem === undefined) {
    jwtProblems.push(`JWT_PRIVATE_KEY (a PKCS#8 PEM private key) is required for ${algorithm}`);
  } else if (!privateKeyPem.includes("PRIVATE KEY")) {
    jwtProblems.push("JWT_PRIVATE_KEY must be a PEM private key (-----BEGIN PRIVATE KEY-----)");
    privateKeyPem = undefined;
  }
  const previousSecrets = (env.JWT_SECRET_PREVIOUS ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (previousSecrets.some((s) => Buffer.byteLength(s) < 32)) {
    jwtProblems.push("every JWT_SECRET_PREVIOUS entry must be at least 32 bytes long");
  }

  if (serving) problems.push(...jwtProblems);

  const logLevel = (env.LOG_LEVEL?.trim().toLowerCase() || "info") as LogLevel;
  if (!(logLevels as readonly string[]).includes(logLevel)) {
    problems.push(`LOG_LEVEL must be one of ${logLevels.join(", ")} (got "${env.LOG_LEVEL}")`);
  }

  const dbConnection = env.DB_CONNECTION?.trim() || undefined;
  if (dbConnection !== undefined && !/^postgres(ql)?:\/\//.test(dbConnection)) {
    problems.push("DB_CONNECTION must be a postgres:// URL (unset = embedded database)");
  }

  const certFile = env.TLS_CERT_FILE?.trim() || undefined;
  const keyFile = env.TLS_KEY_FILE?.trim() || undefined;
  if ((certFile === undefined) !== (keyFile === undefined)) {
    problems.push("TLS_CERT_FILE and TLS_KEY_FILE must be set together");
  }

  let dataKeys: DataKeys | undefined;
  const dataKey = env.DATA_ENCRYPTION_KEY?.trim() || undefined;
  if (dataKey === undefined) {
    if (serving) problems.push(dataKeyRequired);
  } else {
    try {
      dataKeys = parseDataKeys(dataKey, env.DATA_ENCRYPTION_KEY_PREVIOUS);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }

  const config: Omit<Config, "dataKeys"> = {
    port: intVar(env, "PORT", 8080, 0, 65535, problems),
    // The demo prints an admin password: it listens on loopback unless told otherwise.
    host: env.HOST?.trim() || (options.demo ? "127.0.0.1" : "0.0.0.0"),
    dataDir: env.DATA_DIR?.trim() || "./data",
    dbConnection,
    database: {
      statementTimeoutMs: intVar(env, "DB_STATEMENT_TIMEOUT_MS", 2_000, 100, 600_000, problems),
      acquireTimeoutMs: intVar(env, "DB_ACQUIRE_TIMEOUT_MS", 1_000, 100, 600_000, problems),
    },
    logLevel,
    logFile: logFileConfig(env, problems),
    metrics: metricsConfig(env, problems),
    tls: certFile && keyFile ? { certFile, keyFile } : undefined,
    jwt: {
      algorithm,
      secret,
      previousSecrets,
      privateKeyPem,
      issuer: env.JWT_ISSUER?.trim() || "traitgate",
      audience: env.JWT_AUDIENCE?.trim() || "traitgate",
      ttlSeconds: intVar(env, "TOKEN_TTL_SECONDS", 900, 60, 86_400, problems),
      refreshTtlSeconds: intVar(
        env,
        "REFRESH_TOKEN_TTL_SECONDS",
        604_800,
        300,
        7_776_000,
        problems,
      ),
      serviceTtlSeconds: intVar(env, "SERVICE_TOKEN_TTL_SECONDS", 600, 60, 3600, problems),
      sessionMaxLifetimeSeconds: intVar(
        env,
        "SESSION_MAX_LIFETIME_SECONDS",
        43_200,
        300,
        7_776_000,
        problems,
      ),
    },
    mfaRequired: boolVar(env, "MFA_REQUIRED", problems),
    maxBodyBytes: intVar(env, "MAX_BODY_BYTES", 1_048_576, 1024, 64 * 1_048_576, problems),
    listener: listenerLimits(env, problems),
    trustedProxies: trustedProxies(env, problems),
    gateway: {
      allowedHosts: pluginAllowedHosts(env, problems),
      defaultTimeoutMs: intVar(env, "GATEWAY_TIMEOUT_MS", 10_000, 10, 600_000, problems),
      maxTimeoutMs: intVar(env, "GATEWAY_MAX_TIMEOUT_MS", 60_000, 10, 600_000, problems),
    },
    auditCheckpoints: {
      keys: checkpointKeysFrom(env, problems),
      intervalSeconds: intVar(env, "AUDIT_CHECKPOINT_INTERVAL_SECONDS", 60, 0, 86_400, problems),
    },
    console: {
      idleTimeoutSeconds: intVar(env, "CONSOLE_IDLE_TIMEOUT_SECONDS", 900, 60, 86_400, problems),
    },
  };
  return { config, dataKeys, problems, generated };
}
