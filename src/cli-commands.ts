/**
 * The commands of `traitgate` (src/cli.ts parses the command line and loads this module only
 * to run one). What only the server needs (src/platform.ts, the demo's retrieval, metrics, log
 * files) and what one command alone uses is imported when that command runs: a one-shot
 * command such as `users create` does not load the server's code.
 */
import cluster from "node:cluster";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import {
  expiryOf,
  issueDemoKey,
  parseApiKeysCreateArgs,
  runApiKeysCreate,
} from "./apikeys/command.js";
import {
  type AuditWriter,
  createAuditWriter,
  ensureDemoCheckpointKey,
  parseAuditExportArgs,
  parseAuditVerifyArgs,
  runAuditExport,
  runAuditVerifyCommand,
} from "./audit/index.js";
import { exitCodes, usageMessage } from "./cli-usage.js";
import {
  type CommandConfig,
  type Config,
  ConfigError,
  embeddedDatabaseDir,
  loadCommandConfig,
  loadConfig,
} from "./config.js";
import {
  type DemoKeyName,
  ensureDemoDataKey,
  ensureDemoSigningKey,
  useDemoKeys,
} from "./demo/keys.js";
import { createLogger, type Logger } from "./log.js";
import { packageRoot } from "./package-root.js";
import {
  createApiKeyRemotely,
  createServiceAccountRemotely,
  createUserRemotely,
  RemoteError,
  remoteTarget,
} from "./remote-admin.js";
import { runIngestCommand } from "./search/ingest-command.js";
import {
  parseWorkerCount,
  superviseWorkers,
  workerSlot,
  workerSlotVariable,
} from "./serve-workers.js";
import { installLastResortGuard } from "./server/last-resort.js";
import { type Database, DataDirLockedError, migrate, openDatabase } from "./storage/index.js";

function fail(message: string, code: number = exitCodes.usage): never {
  process.stderr.write(`traitgate: ${message}\n`);
  process.exit(code);
}

/** A usage error found by a command's own option parsing: exit 2, pointing at its help. */
function usageFail(command: string, problem: unknown): never {
  fail(usageMessage(command, problem instanceof Error ? problem.message : String(problem)));
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
    if (err instanceof ConfigError) {
      fail(
        `refusing to start:\n${err.message}\nSee 'traitgate ${demo ? "demo" : "serve"} --help'.`,
      );
    }
    throw err;
  }
}

/**
 * A one-shot command's configuration: only what it uses is required (src/config.ts,
 * loadCommandConfig); keys it needs that the demo keeps in DATA_DIR are taken from there.
 */
function commandConfigOrExit(command: string, demoKeys: readonly DemoKeyName[]): CommandConfig {
  for (const note of useDemoKeys(process.env, demoKeys))
    process.stderr.write(`traitgate: ${note}\n`);
  try {
    return loadCommandConfig(process.env, {
      usesDataKeys: demoKeys.includes("DATA_ENCRYPTION_KEY"),
    });
  } catch (err) {
    if (err instanceof ConfigError) {
      fail(`${command}: ${err.message}\nSee 'traitgate ${command} --help'.`);
    }
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
    const { openLogHandlers } = await import("./log-handlers.js");
    return await openLogHandlers({ level: config.logLevel, file: config.logFile });
  } catch (err) {
    fail(`refusing to start: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function serve(args: string[]): Promise<void> {
  const command = "serve";
  const { values } = usageChecked(command, () =>
    parseArgs({ args, options: { workers: { type: "string" } }, strict: true }),
  );
  const workers =
    values.workers === undefined
      ? undefined
      : usageChecked(command, () => parseWorkerCount(values.workers ?? ""));
  const { config } = configOrExit(false);
  if (workers !== undefined && cluster.isPrimary) {
    if (config.dbConnection === undefined) {
      fail(
        "serve --workers needs PostgreSQL (DB_CONNECTION): the embedded database (PGlite) is " +
          "opened by one process only. Run 'traitgate serve' without --workers, or set DB_CONNECTION.",
      );
    }
    if (config.logFile !== undefined) {
      fail(
        "serve --workers does not write LOG_FILE: one file rotated by several processes would " +
          "lose lines. Unset LOG_FILE and collect the console output (every line names its worker).",
      );
    }
    const logs = await logHandlersOrExit(config);
    const log = logs.log.child({ role: "primary" });
    // A scrape of any worker's /metrics answers with every worker's (src/metrics/cluster.ts).
    const { aggregateWorkerMetrics } = await import("./metrics/index.js");
    aggregateWorkerMetrics({ log, expected: workers, slotOf: workerSlot });
    const code = await superviseWorkers({ workers, log });
    await logs.close();
    process.exit(code);
  }
  const logs = await logHandlersOrExit(config);
  // A worker's lines say which one it is (its slot, kept by a replacement, and its pid).
  const slot = cluster.isWorker ? process.env[workerSlotVariable] : undefined;
  const log =
    slot === undefined ? logs.log : logs.log.child({ worker: Number(slot), pid: process.pid });
  // One connection's stray error must not stop the process (src/server/last-resort.ts).
  const lastResort = installLastResortGuard(log);
  const { startCore } = await import("./platform.js");
  const { workerMetricsSource } = await import("./metrics/index.js");
  const core = await startCore({
    config,
    log,
    lastResort,
    ...(slot === undefined ? {} : { metricsSource: workerMetricsSource }),
  });
  stopOnSignals(async () => {
    await core.close();
    log.info("stopped");
    // Every line so far is in the file before the process exits.
    await logs.close();
  }, log);
}

async function demo(): Promise<void> {
  const keyNote = ensureDemoDataKey(process.env);
  const checkpointKeyNote = ensureDemoCheckpointKey(process.env);
  const signingKeyNote = ensureDemoSigningKey(process.env);
  const { config, generated } = configOrExit(true);
  if (keyNote) generated.push(keyNote);
  if (checkpointKeyNote) generated.push(checkpointKeyNote);
  if (signingKeyNote) generated.push(signingKeyNote);
  const logs = await logHandlersOrExit(config);
  const { log } = logs;
  const lastResort = installLastResortGuard(log);
  const { startCore } = await import("./platform.js");
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
  const { setUpDemoRetrieval } = await import("./demo/retrieval.js");
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
    `OpenID/OAuth discovery: ${url}/.well-known/openid-configuration (keys: ${url}/.well-known/jwks.json)`,
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

/** How a one-shot command opens the database (withDatabase). */
interface CommandOptions {
  /** Its name, for messages: "users create". */
  command: string;
  /** Keys it uses that the demo keeps in DATA_DIR; DATA_ENCRYPTION_KEY here makes it required. */
  demoKeys?: readonly DemoKeyName[];
  /** What else the operator can do when DATA_DIR is held by another process. */
  hint?: string;
}

interface CommandContext {
  config: CommandConfig;
  log: Logger;
  db: Database;
}

/**
 * What a one-shot command works with: the configuration, a logger on stderr, and the
 * migrated database, closed when `fn` is done. The embedded database is locked first
 * (src/storage/dir-lock.ts): while another process holds it, nothing is done.
 */
async function withDatabase<T>(
  options: CommandOptions,
  fn: (ctx: CommandContext) => Promise<T>,
): Promise<T> {
  const config = commandConfigOrExit(options.command, options.demoKeys ?? []);
  const log = createLogger({ level: "warn", destination: process.stderr });
  let db: Database;
  try {
    db = await openDatabase({
      connection: config.dbConnection,
      dataDir: embeddedDatabaseDir(config),
      log,
    });
  } catch (err) {
    if (err instanceof DataDirLockedError && options.hint) {
      throw new Error(`${err.message}. ${options.hint}`);
    }
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
  options: CommandOptions,
  fn: (ctx: CommandContext & { audit: AuditWriter }) => Promise<T>,
): Promise<T> {
  return withDatabase(options, async (ctx) => {
    const audit = createAuditWriter({ db: ctx.db, log: ctx.log });
    try {
      return await fn({ ...ctx, audit });
    } finally {
      await audit.close();
    }
  });
}

/** The data keys of a command that declared DATA_ENCRYPTION_KEY (loadCommandConfig required it). */
function dataKeysOf(config: CommandConfig) {
  if (config.dataKeys === undefined) throw new Error("DATA_ENCRYPTION_KEY is not configured");
  return config.dataKeys;
}

/**
 * The identity area as the command line uses it (no server). The command line issues no
 * token: without JWT_* configured, its token service gets a key of its own that signs nothing.
 */
async function identityFor({ config, log, db, audit }: CommandContext & { audit: AuditWriter }) {
  const { createIdentityModule } = await import("./identity/module.js");
  return createIdentityModule({
    db,
    jwt:
      config.jwt.secret || config.jwt.privateKeyPem
        ? config.jwt
        : { ...config.jwt, algorithm: "HS256", secret: randomBytes(48).toString("base64url") },
    log,
    audit,
    dataKeys: dataKeysOf(config),
    mfaRequired: config.mfaRequired,
  });
}

/** A command's own option parsing: what it throws (unknown or malformed option) is a usage error. */
function usageChecked<T>(command: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    usageFail(command, err);
  }
}

async function usersCreate(args: string[]): Promise<void> {
  const command = "users create";
  const { values } = usageChecked(command, () =>
    parseArgs({
      args,
      options: {
        username: { type: "string" },
        email: { type: "string", default: "" },
        role: { type: "string", multiple: true, default: [] },
        url: { type: "string" },
      },
      strict: true,
    }),
  );
  const username = values.username;
  if (!username) usageFail(command, "--username is required");
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
  // The password is asked for once the database is this process's (nothing asked in vain).
  const created = await withAudit(
    { command, demoKeys: ["DATA_ENCRYPTION_KEY"], hint: urlHint("users:write") },
    async (ctx) => {
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
    },
  );
  if (!created) fail(noPassword);
}

async function serviceAccountsCreate(args: string[]): Promise<void> {
  const command = "service-accounts create";
  const { values } = usageChecked(command, () =>
    parseArgs({
      args,
      options: {
        name: { type: "string" },
        description: { type: "string", default: "" },
        role: { type: "string", multiple: true, default: [] },
        url: { type: "string" },
      },
      strict: true,
    }),
  );
  const name = values.name;
  if (!name) usageFail(command, "--name is required");
  if (!/^[a-z0-9][a-z0-9-]{1,62}$/.test(name)) {
    usageFail(command, "--name must be 2–63 lower-case letters, digits or hyphens");
  }
  for (const role of values.role) {
    if (!/^[a-z][a-z0-9_-]{0,63}$/.test(role)) {
      usageFail(command, `--role "${role}" is not a valid role name`);
    }
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
  await withAudit(
    { command, demoKeys: ["DATA_ENCRYPTION_KEY"], hint: urlHint("service_accounts:write") },
    async (ctx) => {
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
    },
  );
}

async function auditVerify(args: string[]): Promise<void> {
  const command = "audit verify";
  const parsed = usageChecked(command, () => parseAuditVerifyArgs(args));
  process.exit(
    await withDatabase({ command, demoKeys: ["AUDIT_CHECKPOINT_KEY"] }, ({ db, config }) =>
      runAuditVerifyCommand(db, process.stdout, {
        ...parsed,
        trustedKeys: config.auditCheckpoints.keys.trusted,
      }),
    ),
  );
}

async function keysRotate(): Promise<void> {
  const { runKeysRotateCommand } = await import("./crypto/rotate-command.js");
  process.exit(
    await withDatabase(
      { command: "keys rotate", demoKeys: ["DATA_ENCRYPTION_KEY"] },
      ({ db, config }) =>
        runKeysRotateCommand(db, dataKeysOf(config), {
          progress: process.stderr,
          out: process.stdout,
        }),
    ),
  );
}

async function apiKeysCreate(args: string[]): Promise<void> {
  const command = "apikeys create";
  const parsed = usageChecked(command, () => parseApiKeysCreateArgs(args));
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
    await withAudit({ command, hint: urlHint("api_keys:write") }, async ({ db, audit, log }) => {
      const { createApiKeysModule } = await import("./apikeys/module.js");
      return runApiKeysCreate(createApiKeysModule({ db, audit, log }).apiKeys, parsed, {
        stdout: process.stdout,
        stderr: process.stderr,
      });
    }),
  );
}

async function auditExport(args: string[]): Promise<void> {
  const command = "audit export";
  const options = usageChecked(command, () => parseAuditExportArgs(args));
  const count = await withDatabase({ command }, ({ db }) =>
    runAuditExport(db, process.stdout, options),
  );
  process.stderr.write(`audit export: ${count} events\n`);
}

const io = { out: process.stdout, err: process.stderr };

/** Runs a command the command line named (parseCommandLine checked its name and --help). */
export async function run(command: string, args: string[]): Promise<void> {
  switch (command) {
    case "serve":
      return serve(args);
    case "demo":
      return demo();
    case "users create":
      return usersCreate(args);
    case "service-accounts create":
      return serviceAccountsCreate(args);
    case "apikeys create":
      return apiKeysCreate(args);
    case "audit verify":
      return auditVerify(args);
    case "audit export":
      return auditExport(args);
    case "policy test": {
      const { runPolicyTestCommand } = await import("./policy/test-command.js");
      process.exit(await runPolicyTestCommand(args, io));
      return;
    }
    case "keys rotate":
      return keysRotate();
    case "ingest":
      process.exit(await runIngestCommand(args, { ...io, env: process.env }));
      return;
    case "rag-plugin": {
      const { runRagPluginCommand } = await import("./rag/command.js");
      const code = await runRagPluginCommand(process.env, process.stderr);
      if (code !== undefined) process.exit(code);
      return;
    }
    default:
      throw new Error(`no runner for the command "${command}"`);
  }
}
