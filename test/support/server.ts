import { type Config, loadConfig } from "../../src/config.js";
import type { HostResolver } from "../../src/gateway/host-policy.js";
import type { ThrottlePolicy } from "../../src/identity/throttle.js";
import type { Clock } from "../../src/identity/tokens.js";
import { createLogger } from "../../src/log.js";
import { type Core, startCore } from "../../src/platform.js";
import type { Database } from "../../src/storage/index.js";
import { openTestDatabase } from "./database.js";

export const testSecret = "tEst-Secret-0123456789-abcdefghijklmnop";
/** 32 bytes, base64: the data encryption key of test servers. */
export const testDataKey = Buffer.alloc(32, 7).toString("base64");
/**
 * argon2id at 1 MiB and one pass for the test servers' new hashes: the suites hash and check
 * hundreds of passwords, at ~50 ms of CPU each with the production cost. What the cost is in
 * production is tested in test/unit/passwords.test.ts.
 */
export const testPasswordCost = { memoryCost: 1024, timeCost: 1 };

export interface TestServer {
  core: Core;
  url: string;
  port: number;
  config: Config;
  /** Every log line the server wrote, as text. */
  logs: string[];
  createUser(username: string, password: string, roles?: string[]): Promise<string>;
  /** An API key made as the command line makes one; the key itself (`tgk_...`). */
  createApiKey(scopes: string[], options?: { name?: string; expiresAt?: Date }): Promise<string>;
  close(): Promise<void>;
}

/** A real core on port 0 with a fresh in-memory database and captured logs. */
export async function startTestServer(
  options: {
    env?: NodeJS.ProcessEnv;
    clock?: Clock;
    throttlePolicy?: ThrottlePolicy;
    /**
     * An already migrated database (closed with the server); default: the one `env`'s
     * DB_CONNECTION names, opened by the core as in production, else a fresh PGlite.
     */
    db?: Database;
    /** Settings: version poll interval (src/settings/module.ts). */
    settingsPollIntervalMs?: number;
    /** Policy: generation poll interval (src/policy/module.ts). */
    policyPollIntervalMs?: number;
    /** How plugin host names resolve (default getaddrinfo). */
    resolveHost?: HostResolver;
  } = {},
): Promise<TestServer> {
  const env: NodeJS.ProcessEnv = {
    JWT_SECRET: testSecret,
    DATA_ENCRYPTION_KEY: testDataKey,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "debug",
    ...options.env,
  };
  const { config } = loadConfig(env);
  const logs: string[] = [];
  const log = createLogger({
    level: "debug",
    destination: { write: (line: string) => void logs.push(line) },
  });
  const db = options.db ?? (config.dbConnection ? undefined : await openTestDatabase());
  const core = await startCore({
    config,
    log,
    ...(db ? { db } : {}),
    env,
    ...(options.settingsPollIntervalMs
      ? { settingsPollIntervalMs: options.settingsPollIntervalMs }
      : {}),
    ...(options.policyPollIntervalMs ? { policyPollIntervalMs: options.policyPollIntervalMs } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.throttlePolicy ? { throttlePolicy: options.throttlePolicy } : {}),
    passwordCost: testPasswordCost,
    ...(options.resolveHost ? { resolveHost: options.resolveHost } : {}),
  });
  return {
    core,
    url: core.server.url,
    port: core.server.port,
    config,
    logs,
    async createUser(username, password, roles = ["viewer"]) {
      const user = await core.identity.createUser({
        username,
        email: `${username}@example.test`,
        password,
        roles,
      });
      return user.id;
    },
    async createApiKey(scopes, keyOptions = {}) {
      const { key } = await core.apiKeys.create(
        { type: "system" },
        { requestId: null },
        { name: keyOptions.name ?? "test key", scopes, expiresAt: keyOptions.expiresAt },
      );
      return key;
    },
    async close() {
      await core.close();
      await db?.close();
    },
  };
}
