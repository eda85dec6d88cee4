#!/usr/bin/env node
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import {
  expiryOf,
  issueDemoKey,
  parseApiKeysCreateArgs,
  runApiKeysCreate,
} from "./apikeys/command.js";
import { createApiKeysModule } from "./apikeys/module.js";
import {
  type AuditWriter,
  createAuditWriter,
  ensureDemoCheckpointKey,
  parseAuditExportArgs,
  parseAuditVerifyArgs,
  runAuditExport,
  runAuditVerifyCommand,
} from "./audit/index.js";
import { type Config, ConfigError, embeddedDatabaseDir, loadConfig } from "./config.js";
import { runKeysRotateCommand } from "./crypto/rotate-command.js";
import { generateDataKey } from "./crypto/secret-box.js";
import { setUpDemoRetrieval } from "./demo/retrieval.js";
import { createIdentityModule } from "./identity/module.js";
import { createLogger, type Logger } from "./log.js";
import { openLogHandlers } from "./log-handlers.js";
import { startCore } from "./platform.js";
import {
  createApiKeyRemotely,
  createServiceAccountRemotely,
  createUserRemotely,
  RemoteError,
  remoteTarget,
} from "./remote-admin.js";
import { runIngestCommand } from "./search/ingest-command.js";
import { installLastResortGuard } from "./server/last-resort.js";
import { type Database, DataDirLockedError, migrate, openDatabase } from "./storage/index.js";

const usage = `Usage: traitgate <command> [options]

Commands:
  serve                      Run the core services (configuration from the environment).
  demo                       Run everything on the embedded database with generated secrets
                             and an admin user whose password is printed once.
  users create --username NAME [--email EMAIL] [--role ROLE ...] [--url URL]
                             Create a user. The password is read from the environment
                             variable TRAITGATE_PASSWORD or, if unset, from standard input.
  service-accounts create --name NAME [--description TEXT] [--role ROLE ...] [--url URL]
                             Create a service account (client credentials for POST
                             /auth/token); prints its client secret once.
  audit verify [--expect-head SEQ:HASH] [--expect-checkpoint JSON]
                             Check the audit log's hash chain and signed checkpoints, and that
                             it still holds heads kept elsewhere; exit 1 naming the first broken
                             event or the cut. (With the embedded database, stop the server first.)
  audit export [--since T] [--until T] [--action A] [--actor-id ID] [--actor-type T] [--outcome O]
                             Write the matching audit events as JSON lines to stdout, oldest
                             first. (With the embedded database, stop the server first.)
  apikeys create --name NAME --scope S [--scope S ...] [--expires-in-days N] [--url URL]
                             Create an API key (the first one comes from here); prints the
                             key once on stdout. Scopes: docs/api-keys.md.

  policy test CASES.json [--policy POLICY.json] [--traits TRAITS.json]
                             Run a table of request -> expected decision against a policy
                             file (default: the shipped policy), with per-rule coverage;
                             exit 1 on a failing case or an invalid policy (docs/policy.md).
  keys rotate                Re-encrypt every value sealed with an older data key under
                             DATA_ENCRYPTION_KEY; exit 1 naming rows that do not open.
  ingest DIR [--required-traits T,T] [--classification C] [--url URL] [--source NAME]
             [--allow-access-change]
                             Send the .md/.txt/.html files under DIR to a running core
                             (TRAITGATE_URL, TRAITGATE_TOKEN) for search, with progress;
                             paths as NAME/... (default: DIR's name). Changing the traits
                             or classification of documents already ingested needs
                             --allow-access-change.
  rag-plugin                 Run the RAG plugin as its own process (PORT, default 8080;
                             CORE_SECRET, EMBEDDING_DIM, EMBEDDINGS_*: docs/rag.md).
  help                       Show this text.

With the embedded database, one process at a time opens DATA_DIR: a command refuses to run
while another process (the server) holds it, naming its pid. users, service-accounts and
apikeys create then take --url URL: through that server's admin API, as the administrator
whose access token is in TRAITGATE_TOKEN (apikeys: and an API key in TRAITGATE_API_KEY).

Configuration (environment): PORT, HOST, DATA_DIR, DB_CONNECTION, LOG_LEVEL, JWT_SECRET,
JWT_SECRET_PREVIOUS, JWT_ALGORITHM, JWT_PRIVATE_KEY, JWT_ISSUER, JWT_AUDIENCE,
TOKEN_TTL_SECONDS, REFRESH_TOKEN_TTL_SECONDS, SERVICE_TOKEN_TTL_SECONDS, MFA_REQUIRED,
SESSION_MAX_LIFETIME_SECONDS,
TLS_CERT_FILE, TLS_KEY_FILE, DATA_ENCRYPTION_KEY, DATA_ENCRYPTION_KEY_PREVIOUS,
MAX_BODY_BYTES, PLUGIN_ALLOWED_HOSTS, GATEWAY_TIMEOUT_MS, GATEWAY_MAX_TIMEOUT_MS,
AUDIT_CHECKPOINT_KEY, AUDIT_CHECKPOINT_KEY_PREVIOUS, AUDIT_CHECKPOINT_PUBLIC_KEYS,
AUDIT_CHECKPOINT_INTERVAL_SECONDS, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS,
HTTP2_IDLE_TIMEOUT_MS, HTTP1_HEADERS_TIMEOUT_MS, CONSOLE_IDLE_TIMEOUT_SECONDS, METRICS_PORT,
METRICS_HOST, METRICS_PUBLIC, METRICS_TOKEN, LOG_FILE, LOG_FILE_MAX_SIZE, LOG_FILE_FREQUENCY,
LOG_FILE_KEEP. See README.md and docs/operations.md.`;

function fail(message: string, code = 2): never {
  process.stderr.write(`traitgate: ${message}\n`);
  process.exit(code);
}

/** A `--url` command's work; a RemoteError ends the process with its message and exit code. */
async function remotely<T>(work: () => T | Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof RemoteError) fail(err.message, err.exitCode);
    throw err;
  }
}

/** Said when DATA_DIR is held by another process and the command has a `--url` mode. */
const urlHint = (scope: string) =>
  "Or go through that server: add --url URL, with an administrator's access token in " +
  `TRAITGATE_TOKEN and an API key with ${scope} in TRAITGATE_API_KEY.`;

function configOrExit(demo: boolean): { config: Config; generated: string[] } {
  try {
    return loadConfig(process.env, { demo });
  } catch (err) {
    if (err instanceof ConfigError) fail(`refusing to start:\n${err.message}`);
    throw err;
  }
}

function stopOnSignals(close: () => Promise<void>, log: Logger): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down");
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
}

/** The console and, with LOG_FILE, the file (src/log-handlers.ts). */
async function logHandlersOrExit(config: Config) {
  try {
    return await openLogHandlers({ level: config.logLevel, file: config.logFile });
  } catch (err) {
    fail(`refusing to start: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function serve(): Promise<void> {
  const { config } = configOrExit(false);
  const logs = await logHandlersOrExit(config);
  const { log } = logs;
  // One connection's stray error must not stop the process (src/server/last-resort.ts).
  const lastResort = installLastResortGuard(log);
  const core = await startCore({ config, log, lastResort });
  stopOnSignals(async () => {
    await core.close();
    log.info("stopped");
    // Every line so far is in the file before the process exits.
    await logs.close();
  }, log);
}

/**
 * Demo mode keeps a generated data encryption key in DATA_DIR (mode 0600), so
 * secrets sealed in one run open in the next; the embedded database persists too.
 */
function ensureDemoDataKey(): string | undefined {
  if (process.env.DATA_ENCRYPTION_KEY) return undefined;
  const dataDir = process.env.DATA_DIR?.trim() || "./data";
  const file = join(dataDir, "demo-encryption.key");
  mkdirSync(dataDir, { recursive: true });
  if (!existsSync(file)) writeFileSync(file, `${generateDataKey()}\n`, { mode: 0o600 });
  process.env.DATA_ENCRYPTION_KEY = readFileSync(file, "utf8").trim();
  return `DATA_ENCRYPTION_KEY was not set: the demo key in ${file} is used (generated on first run)`;
}

async function demo(): Promise<void> {
  const keyNote = ensureDemoDataKey();
  const checkpointKeyNote = ensureDemoCheckpointKey(process.env);
  const { config, generated } = configOrExit(true);
  if (keyNote) generated.push(keyNote);
  if (checkpointKeyNote) generated.push(checkpointKeyNote);
  const logs = await logHandlersOrExit(config);
  const { log } = logs;
  const lastResort = installLastResortGuard(log);
  const core = await startCore({ config, log, lastResort });
  let retrievalPlugin: { close(): Promise<void> } | undefined;
  stopOnSignals(async () => {
    await core.close();
    await retrievalPlugin?.close();
    log.info("stopped");
    await logs.close();
  }, log);
  const password = randomBytes(18).toString("base64url");
  // Audited as the system actor, each change with its event (docs/audit.md).
  const meta = { requestId: `cli-${randomBytes(8).toString("hex")}` };
  const existed = await core.identity.setPassword("admin", password, meta);
  if (!existed) {
    await core.identity.createUser(
      { username: "admin", email: "", password, roles: ["admin"] },
      meta,
    );
  }
  const demoKey = await issueDemoKey(core.apiKeys);
  const url = core.server.url;
  const loopback = /^(127\.|\[::1\]|\[::ffff:127\.)/.test(core.server.address);
  const people: string[] = [];
  for (const [username, role] of [
    ["dr-lee", "clinician"],
    ["vic", "viewer"],
  ] as const) {
    const pw = randomBytes(12).toString("base64url");
    if (!(await core.identity.setPassword(username, pw, meta))) {
      await core.identity.createUser({ username, email: "", password: pw, roles: [role] }, meta);
    }
    people.push(`  ${username} (${role}): ${pw}`);
  }
  const retrieval = await setUpDemoRetrieval(core, {
    dataDir: config.dataDir,
    port: config.port === 0 ? 0 : config.port + 1,
    corpusDir: join(packageRoot(), "examples", "corpus"),
    log,
  });
  retrievalPlugin = retrieval.plugin;
  const lines = [
    "",
    `Traitgate demo is running at ${url} (gRPC, Connect, gRPC-Web and REST on one port)`,
    loopback
      ? `Listening on ${core.server.address}: this machine only (HOST to change it).`
      : `Listening on ${core.server.address} (HOST): other machines can reach it and try the password below.`,
    `Admin console: ${url}/console/ (sign in as admin; the policy asks administrators for a`,
    "  second factor: set one up on the console's first page, sign in again, then paste the API key)",
    `Metrics (Prometheus): ${core.metricsAt.url} (${core.metricsAt.access}; docs/operations.md)`,
    `OpenAPI 3.1 of the REST API: ${url}/openapi.json (docs/api.md#openapi)`,
    ...(generated.length > 0
      ? ["Generated because none was configured:", ...generated.map((g) => `  - ${g}`)]
      : []),
    `Admin user (password printed once, ${existed ? "reset for this run" : "created now"}):`,
    "  username: admin",
    `  password: ${password}`,
    "API key for the admin APIs (X-API-Key; printed once, earlier demo keys revoked):",
    `  api key: ${demoKey.key}`,
    "Try:",
    `  curl -s ${url}/auth/login -H 'content-type: application/json' \\`,
    `    -d '{"username":"admin","password":"${password}"}'`,
    `  curl -s ${url}/auth/validate -H "authorization: Bearer <token>"`,
    `  curl -s ${url}/api/admin/api-keys -H "authorization: Bearer <token>" \\`,
    `    -H "x-api-key: <api key>"`,
    `Retrieval: the RAG plugin runs at ${retrieval.pluginUrl} (registered as "rag", allowlisted`,
    `for ai-core, rag.backend = plugin); the sample corpus is ingested (${retrieval.ingested.documents} documents,`,
    `${retrieval.ingested.indexed} indexed now). Users with different roles (passwords printed once):`,
    ...people,
    "Search as each and compare (docs/rag.md):",
    `  curl -s ${url}/api/search -H "authorization: Bearer <token>" \\`,
    `    -H 'content-type: application/json' -d '{"q": "sepsis lactate antibiotics"}'`,
    "",
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}

/** The folder holding package.json (src/ under tsx, dist/src/ when built). */
function packageRoot(): string {
  let dir = import.meta.dirname;
  while (!existsSync(join(dir, "package.json"))) {
    const parent = join(dir, "..");
    if (parent === dir) throw new Error("cannot find the package folder");
    dir = parent;
  }
  return dir;
}

/** TRAITGATE_PASSWORD or the first line of stdin; undefined when there is neither. */
async function readPassword(): Promise<string | undefined> {
  const fromEnv = process.env.TRAITGATE_PASSWORD;
  if (fromEnv) return fromEnv;
  if (process.stdin.isTTY) process.stderr.write("password: ");
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    rl.close();
    return line;
  }
  return undefined;
}

const noPassword = "no password: set TRAITGATE_PASSWORD or pass it on standard input";

/**
 * What a one-shot command works with: the configuration, a logger on stderr, and the
 * migrated database, closed when `fn` is done. The embedded database is locked first
 * (src/storage/dir-lock.ts): while another process holds it, nothing is done; `hint` says
 * what else the operator can do.
 */
async function withDatabase<T>(
  fn: (ctx: { config: Config; log: Logger; db: Database }) => Promise<T>,
  hint?: string,
): Promise<T> {
  const { config } = configOrExit(false);
  const log = createLogger({ level: "warn", destination: process.stderr });
  let db: Database;
  try {
    db = await openDatabase({
      connection: config.dbConnection,
      dataDir: embeddedDatabaseDir(config),
      log,
    });
  } catch (err) {
    if (err instanceof DataDirLockedError && hint) throw new Error(`${err.message}. ${hint}`);
    throw err;
  }
  try {
    await migrate(db, log);
    return await fn({ config, log, db });
  } finally {
    await db.close();
  }
}

/** withDatabase plus an audit writer, flushed before the database closes. */
function withAudit<T>(
  fn: (ctx: { config: Config; log: Logger; db: Database; audit: AuditWriter }) => Promise<T>,
  hint?: string,
): Promise<T> {
  return withDatabase(async (ctx) => {
    const audit = createAuditWriter({ db: ctx.db, log: ctx.log });
    try {
      return await fn({ ...ctx, audit });
    } finally {
      await audit.close();
    }
  }, hint);
}

/** The identity area as the command line uses it (no server). */
const identityFor = ({ config, log, db, audit }: Parameters<Parameters<typeof withAudit>[0]>[0]) =>
  createIdentityModule({
    db,
    jwt: config.jwt,
    log,
    audit,
    dataKeys: config.dataKeys,
    mfaRequired: config.mfaRequired,
  });

async function usersCreate(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      username: { type: "string" },
      email: { type: "string", default: "" },
      role: { type: "string", multiple: true, default: [] },
      url: { type: "string" },
    },
    strict: true,
  });
  const username = values.username;
  if (!username) fail("users create needs --username");
  const input = { username, email: values.email, roles: values.role };
  if (values.url !== undefined) {
    const target = await remotely(() =>
      remoteTarget(values.url ?? "", process.env, { needsApiKey: true }),
    );
    const password = (await readPassword()) ?? fail(noPassword);
    const user = await remotely(() => createUserRemotely(target, { ...input, password }));
    process.stdout.write(`${JSON.stringify(user)}\n`);
    return;
  }
  configOrExit(false);
  // The password is asked for once the database is this process's (nothing asked in vain).
  const created = await withAudit(async (ctx) => {
    const password = await readPassword();
    if (password === undefined) return false;
    const { identity } = await identityFor(ctx);
    const user = await identity.createUser(
      { ...input, password },
      { requestId: `cli-${randomBytes(8).toString("hex")}` },
    );
    process.stdout.write(
      `${JSON.stringify({ id: user.id, username: user.username, roles: user.roles })}\n`,
    );
    return true;
  }, urlHint("users:write"));
  if (!created) fail(noPassword);
}

async function serviceAccountsCreate(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      name: { type: "string" },
      description: { type: "string", default: "" },
      role: { type: "string", multiple: true, default: [] },
      url: { type: "string" },
    },
    strict: true,
  });
  const name = values.name;
  if (!name) fail("service-accounts create needs --name");
  if (!/^[a-z0-9][a-z0-9-]{1,62}$/.test(name)) {
    fail("--name must be 2–63 lower-case letters, digits or hyphens");
  }
  for (const role of values.role) {
    if (!/^[a-z][a-z0-9_-]{0,63}$/.test(role)) fail(`--role "${role}" is not a valid role name`);
  }
  const input = { name, description: values.description, roles: values.role };
  const shownOnce = "The client secret is shown once; store it in the service's secrets.\n";
  if (values.url !== undefined) {
    const target = await remotely(() =>
      remoteTarget(values.url ?? "", process.env, { needsApiKey: true }),
    );
    const created = await remotely(() => createServiceAccountRemotely(target, input));
    process.stderr.write(shownOnce);
    process.stdout.write(`${JSON.stringify(created)}\n`);
    return;
  }
  await withAudit(async (ctx) => {
    const { serviceAccounts } = await identityFor(ctx);
    const { account, clientSecret } = await serviceAccounts.create(
      { userId: "", kind: "system" },
      { requestId: `cli-${randomBytes(8).toString("hex")}` },
      input,
    );
    process.stderr.write(shownOnce);
    process.stdout.write(
      `${JSON.stringify({ id: account.id, name: account.name, roles: account.roles, client_secret: clientSecret })}\n`,
    );
  }, urlHint("service_accounts:write"));
}

async function auditVerify(args: string[]): Promise<void> {
  let parsed: ReturnType<typeof parseAuditVerifyArgs>;
  try {
    parsed = parseAuditVerifyArgs(args);
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
  process.exit(
    await withDatabase(({ db, config }) =>
      runAuditVerifyCommand(db, process.stdout, {
        ...parsed,
        trustedKeys: config.auditCheckpoints.keys.trusted,
      }),
    ),
  );
}

async function keysRotate(): Promise<void> {
  process.exit(
    await withDatabase(({ db, config }) =>
      runKeysRotateCommand(db, config.dataKeys, {
        progress: process.stderr,
        out: process.stdout,
      }),
    ),
  );
}

async function apiKeysCreate(args: string[]): Promise<void> {
  let parsed: ReturnType<typeof parseApiKeysCreateArgs>;
  try {
    parsed = parseApiKeysCreateArgs(args);
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
  if (parsed.url !== undefined) {
    const target = await remotely(() =>
      remoteTarget(parsed.url ?? "", process.env, { needsApiKey: true }),
    );
    const { key, id, prefix } = await remotely(() =>
      createApiKeyRemotely(target, {
        ...parsed,
        expiresAt: expiryOf(parsed.expiresInDays, Date.now()),
      }),
    );
    process.stdout.write(`${key}\n`);
    process.stderr.write(`created API key ${id} (${prefix}); the key is shown only this once.\n`);
    return;
  }
  process.exit(
    await withAudit(
      ({ db, audit, log }) =>
        runApiKeysCreate(createApiKeysModule({ db, audit, log }).apiKeys, parsed, {
          stdout: process.stdout,
          stderr: process.stderr,
        }),
      urlHint("api_keys:write"),
    ),
  );
}

async function auditExport(args: string[]): Promise<void> {
  let options: ReturnType<typeof parseAuditExportArgs>;
  try {
    options = parseAuditExportArgs(args);
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
  const count = await withDatabase(({ db }) => runAuditExport(db, process.stdout, options));
  process.stderr.write(`audit export: ${count} events\n`);
}

async function main(argv: string[]): Promise<void> {
  const [command, sub, ...rest] = argv;
  switch (command) {
    case "serve":
      return serve();
    case "demo":
      return demo();
    case "audit":
      if (sub === "verify") return auditVerify(rest);
      if (sub === "export") return auditExport(rest);
      return fail(`unknown audit command "${sub ?? ""}"\n\n${usage}`);
    case "policy": {
      if (sub !== "test") return fail(`unknown policy command "${sub ?? ""}"\n\n${usage}`);
      const { runPolicyTestCommand } = await import("./policy/test-command.js");
      process.exit(await runPolicyTestCommand(rest, { out: process.stdout, err: process.stderr }));
      return;
    }
    case "keys":
      if (sub === "rotate") return keysRotate();
      return fail(`unknown keys command "${sub ?? ""}"\n\n${usage}`);
    case "service-accounts":
      if (sub === "create") return serviceAccountsCreate(rest);
      return fail(`unknown service-accounts command "${sub ?? ""}"\n\n${usage}`);
    case "apikeys":
      if (sub === "create") return apiKeysCreate(rest);
      return fail(`unknown apikeys command "${sub ?? ""}"\n\n${usage}`);
    case "ingest": {
      const code = await runIngestCommand(
        [sub, ...rest].filter((a) => a !== undefined),
        {
          env: process.env,
          err: process.stderr,
          out: process.stdout,
        },
      );
      process.exit(code);
      return;
    }
    case "rag-plugin": {
      const { runRagPluginCommand } = await import("./rag/command.js");
      const code = await runRagPluginCommand(process.env, process.stderr);
      if (code !== undefined) process.exit(code);
      return;
    }
    case "users":
      if (sub === "create") return usersCreate(rest);
      return fail(`unknown users command "${sub ?? ""}"\n\n${usage}`);
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(`${usage}\n`);
      return;
    default:
      fail(`unknown command "${command}"\n\n${usage}`);
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`traitgate: ${message}\n`);
  process.exit(1);
});
