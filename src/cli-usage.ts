/**
 * The command line's grammar, before anything runs: which command is asked for, whether it
 * is a request for help or the version, and usage errors. Pure (no process, no config), so
 * the whole table is tested in process (test/unit/cli-usage.test.ts).
 *
 * Exit codes, the same for every command: 0 success, 1 failure, 2 usage or configuration error.
 */

export const exitCodes = { ok: 0, failure: 1, usage: 2 } as const;

export interface CommandSpec {
  /** The words that name it, e.g. ["users", "create"]. */
  path: readonly string[];
  /** Its arguments after the path, as the usage line shows them. */
  synopsis: string;
  /** One line for the command list. */
  summary: string;
  /** The rest of its help: options, what it needs from the environment. */
  details: string;
  /** Does it take arguments or options (besides --help)? */
  takesArgs: boolean;
}

const embeddedNote =
  "With the embedded database (no DB_CONNECTION), one process at a time opens DATA_DIR: the\n" +
  "command refuses to run while another process holds it, naming its pid.";

const demoKeyNote =
  "DATA_ENCRYPTION_KEY: if unset and DATA_DIR holds the demo's demo-encryption.key, that key\n" +
  "is used (a DATA_DIR the demo made needs no setting).";

const remoteNote = (scope: string) =>
  `  --url URL                  Go through that running server's admin API instead of the database:\n` +
  `                             as the administrator whose access token is in TRAITGATE_TOKEN, with\n` +
  `                             an API key holding ${scope} in TRAITGATE_API_KEY.`;

export const commands: readonly CommandSpec[] = [
  {
    path: ["serve"],
    synopsis: "[--workers N]",
    summary: "Run the core services (configuration from the environment).",
    details:
      "Needs JWT_SECRET (or JWT_ALGORITHM with JWT_PRIVATE_KEY) and DATA_ENCRYPTION_KEY. A bad or\n" +
      "missing setting: exit 2, naming every problem at once.\n\n" +
      "Configuration (environment; README.md, Configuration): PORT, HOST, DATA_DIR, DB_CONNECTION,\n" +
      "LOG_LEVEL, JWT_SECRET, JWT_SECRET_PREVIOUS, JWT_ALGORITHM, JWT_PRIVATE_KEY, JWT_ISSUER,\n" +
      "JWT_AUDIENCE, TOKEN_TTL_SECONDS, REFRESH_TOKEN_TTL_SECONDS, SERVICE_TOKEN_TTL_SECONDS,\n" +
      "MFA_REQUIRED, SESSION_MAX_LIFETIME_SECONDS, TLS_CERT_FILE, TLS_KEY_FILE, DATA_ENCRYPTION_KEY,\n" +
      "DATA_ENCRYPTION_KEY_PREVIOUS, MAX_BODY_BYTES, PLUGIN_ALLOWED_HOSTS, GATEWAY_TIMEOUT_MS,\n" +
      "GATEWAY_MAX_TIMEOUT_MS, AUDIT_CHECKPOINT_KEY, AUDIT_CHECKPOINT_KEY_PREVIOUS,\n" +
      "AUDIT_CHECKPOINT_PUBLIC_KEYS, AUDIT_CHECKPOINT_INTERVAL_SECONDS, TRUSTED_PROXIES,\n" +
      "DB_STATEMENT_TIMEOUT_MS, DB_ACQUIRE_TIMEOUT_MS, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS,\n" +
      "HTTP2_IDLE_TIMEOUT_MS, HTTP1_HEADERS_TIMEOUT_MS, CONSOLE_IDLE_TIMEOUT_SECONDS, METRICS_PORT,\n" +
      "METRICS_HOST, METRICS_PUBLIC, METRICS_TOKEN, LOG_FILE, LOG_FILE_MAX_SIZE, LOG_FILE_FREQUENCY,\n" +
      "LOG_FILE_KEEP.\n\n" +
      "  --workers N                Run N worker processes (1 to 64) that share the port, each a\n" +
      "                             replica with its own caches (node:cluster); a worker that dies\n" +
      "                             is restarted after a backoff; SIGTERM stops them all. Needs\n" +
      "                             PostgreSQL (DB_CONNECTION): refused (exit 2) on the embedded\n" +
      "                             database, and with LOG_FILE. docs/operations.md, Several replicas.",
    takesArgs: true,
  },
  {
    path: ["demo"],
    synopsis: "",
    summary: "Run everything on the embedded database with generated secrets and sample users.",
    details:
      "Generates what is not configured: JWT_SECRET for this run, DATA_ENCRYPTION_KEY and\n" +
      "AUDIT_CHECKPOINT_KEY kept in DATA_DIR (default ./data) for the next runs. Prints the\n" +
      "admin password and an API key once. Listens on 127.0.0.1 unless HOST says otherwise.",
    takesArgs: false,
  },
  {
    path: ["users", "create"],
    synopsis: "--username NAME [--email EMAIL] [--role ROLE ...] [--url URL]",
    summary: "Create a user; the password comes from TRAITGATE_PASSWORD or standard input.",
    details:
      "  --username NAME            The user's name (required).\n" +
      "  --email EMAIL              Their email address.\n" +
      "  --role ROLE                A role; repeat for several.\n" +
      `${remoteNote("users:write")}\n\n` +
      "The password is read from TRAITGATE_PASSWORD or, if unset, the first line of standard\n" +
      `input; never from the command line. Needs the database settings (DATA_DIR or\nDB_CONNECTION) and DATA_ENCRYPTION_KEY, not JWT_SECRET. ${demoKeyNote}\n${embeddedNote}`,
    takesArgs: true,
  },
  {
    path: ["service-accounts", "create"],
    synopsis: "--name NAME [--description TEXT] [--role ROLE ...] [--url URL]",
    summary: "Create a service account; prints its client secret once.",
    details:
      "  --name NAME                2-63 lower-case letters, digits or hyphens (required).\n" +
      "  --description TEXT         What it is for.\n" +
      "  --role ROLE                A role; repeat for several.\n" +
      `${remoteNote("service_accounts:write")}\n\n` +
      "The account gets tokens from POST /auth/token (client credentials). Needs the database\n" +
      `settings and DATA_ENCRYPTION_KEY, not JWT_SECRET. ${demoKeyNote}\n${embeddedNote}`,
    takesArgs: true,
  },
  {
    path: ["apikeys", "create"],
    synopsis: "--name NAME --scope S [--scope S ...] [--expires-in-days N] [--url URL]",
    summary: "Create an API key (the first one comes from here); prints it once.",
    details:
      "  --name NAME                What the key is for (required).\n" +
      "  --scope S                  A scope (docs/api-keys.md); at least one, repeat for more.\n" +
      "  --expires-in-days N        1-365; default: no expiry.\n" +
      `${remoteNote("api_keys:write")}\n\n` +
      "The key alone goes to stdout (KEY=$(traitgate apikeys create ...)). Needs only the\n" +
      `database settings (DATA_DIR or DB_CONNECTION).\n${embeddedNote}`,
    takesArgs: true,
  },
  {
    path: ["audit", "verify"],
    synopsis: "[--expect-head SEQ:HASH] [--expect-checkpoint JSON]",
    summary: "Check the audit log's hash chain and signed checkpoints.",
    details:
      "  --expect-head SEQ:HASH     A head kept elsewhere that the log must still hold.\n" +
      "  --expect-checkpoint JSON   A signed checkpoint kept elsewhere (as GET /api/audit/checkpoints).\n\n" +
      "Exit 1 naming the first broken event or the cut. Needs the database settings; checkpoints\n" +
      "are checked with AUDIT_CHECKPOINT_KEY / AUDIT_CHECKPOINT_PUBLIC_KEYS, or the demo's key in\n" +
      `DATA_DIR when neither is set.\n${embeddedNote}`,
    takesArgs: true,
  },
  {
    path: ["audit", "export"],
    synopsis: "[--since T] [--until T] [--action A] [--actor-id ID] [--actor-type T] [--outcome O]",
    summary: "Write the matching audit events as JSON lines to stdout, oldest first.",
    details:
      "  --since T, --until T       Dates or times, e.g. 2025-03-01T00:00:00Z.\n" +
      "  --action A                 An action, e.g. auth.login.\n" +
      "  --actor-id ID, --actor-type T, --outcome O\n" +
      "                             Only events of that actor or outcome.\n\n" +
      `Needs only the database settings.\n${embeddedNote}`,
    takesArgs: true,
  },
  {
    path: ["policy", "test"],
    synopsis: "CASES.json [--policy POLICY.json] [--traits TRAITS.json]",
    summary: "Run a table of request -> expected decision against a policy file.",
    details:
      "  --policy POLICY.json       The policy to test (default: the shipped policy).\n" +
      "  --traits TRAITS.json       A trait registry (default: the shipped one).\n\n" +
      "Prints per-rule coverage; exit 1 on a failing case, 2 on an invalid file (docs/policy.md).\n" +
      "Needs no configuration and no database.",
    takesArgs: true,
  },
  {
    path: ["keys", "rotate"],
    synopsis: "",
    summary: "Re-encrypt values sealed with an older data key under DATA_ENCRYPTION_KEY.",
    details:
      "Exit 1 naming rows that do not open. Needs the database settings, DATA_ENCRYPTION_KEY and\n" +
      `DATA_ENCRYPTION_KEY_PREVIOUS (docs/encryption.md). ${demoKeyNote}\n${embeddedNote}`,
    takesArgs: false,
  },
  {
    path: ["ingest"],
    synopsis:
      "DIR --required-traits T,T|none --classification C [--url URL] [--source NAME] [--allow-access-change] [--concurrency N]",
    summary: "Send the .md/.txt/.html files under DIR to a running core for search.",
    details:
      "  --required-traits T,T      Traits a reader needs (or none).\n" +
      "  --classification C         How the documents are classified, e.g. internal.\n" +
      "  --url URL                  The core (default: TRAITGATE_URL).\n" +
      "  --source NAME              Paths are sent as NAME/... (default: DIR's name).\n" +
      "  --allow-access-change      Allow changing the traits or classification of documents\n" +
      "                             already ingested.\n" +
      "  --concurrency N            Requests in flight, 1-16 (default 4).\n\n" +
      "Needs TRAITGATE_TOKEN: the access token of a user whose roles include capability:ingest.",
    takesArgs: true,
  },
  {
    path: ["rag-plugin"],
    synopsis: "",
    summary: "Run the RAG plugin as its own process.",
    details:
      "Configuration: PORT (default 8080), CORE_SECRET, EMBEDDING_DIM, EMBEDDINGS_* (docs/rag.md).",
    takesArgs: false,
  },
];

const nameOf = (spec: CommandSpec) => spec.path.join(" ");

const usageLine = (spec: CommandSpec) =>
  `traitgate ${nameOf(spec)}${spec.synopsis ? ` ${spec.synopsis}` : ""}`;

/** `traitgate --help`: every command with one line each. */
export function generalHelp(): string {
  const width = Math.max(...commands.map((c) => nameOf(c).length)) + 2;
  return [
    "Usage: traitgate <command> [options]",
    "",
    "Commands:",
    ...commands.map((c) => `  ${nameOf(c).padEnd(width)} ${c.summary}`),
    "",
    "Options:",
    "  -h, --help     Show help (also after any command: traitgate users create --help).",
    "  -v, --version  Print the version.",
    "",
    "Exit codes: 0 success, 1 failure, 2 usage or configuration error.",
    "Configuration comes from the environment: README.md (Configuration), docs/operations.md.",
  ].join("\n");
}

/** `traitgate <command> --help`. */
export function commandHelp(spec: CommandSpec): string {
  return [`Usage: ${usageLine(spec)}`, "", spec.summary, "", spec.details].join("\n");
}

/** `traitgate users --help`: the group's commands. */
function groupHelp(group: string, members: readonly CommandSpec[]): string {
  return [
    `Usage: traitgate ${group} <command> [options]`,
    "",
    "Commands:",
    ...members.map((c) => `  ${usageLine(c)}\n      ${c.summary}`),
    "",
    `Help on one: traitgate ${group} <command> --help`,
  ].join("\n");
}

export type CommandLine =
  | { kind: "help"; text: string }
  | { kind: "version" }
  | { kind: "run"; command: string; args: string[] }
  | { kind: "usage-error"; message: string };

const isHelp = (arg: string) => arg === "--help" || arg === "-h";

/** Does `args` ask for help? Options end at `--`, after which nothing is an option. */
function asksForHelp(args: readonly string[]): boolean {
  for (const arg of args) {
    if (arg === "--") return false;
    if (isHelp(arg)) return true;
  }
  return false;
}

const usageError = (message: string, helpOf: string): CommandLine => ({
  kind: "usage-error",
  message: `${message}\nSee 'traitgate ${helpOf}--help'.`,
});

/** What the command line asks for; nothing has run yet. */
export function parseCommandLine(argv: readonly string[]): CommandLine {
  const [first, ...rest] = argv;
  if (first === undefined || isHelp(first)) return { kind: "help", text: generalHelp() };
  if (first === "--version" || first === "-v") return { kind: "version" };
  if (first === "help") return helpFor(rest);
  if (first.startsWith("-")) return usageError(`unknown option "${first}"`, "");
  const group = commands.filter((c) => c.path[0] === first);
  if (group.length === 0) return usageError(`unknown command "${first}"`, "");
  const single = group.find((c) => c.path.length === 1);
  if (single !== undefined) return commandLine(single, rest);
  const [second, ...args] = rest;
  const member = group.find((c) => c.path[1] === second);
  if (member === undefined) {
    if (second === undefined || isHelp(second)) {
      if (second !== undefined) return { kind: "help", text: groupHelp(first, group) };
      return usageError(
        `"${first}" needs a command: ${group.map((c) => c.path[1]).join(", ")}`,
        `${first} `,
      );
    }
    return usageError(`unknown ${first} command "${second}"`, `${first} `);
  }
  return commandLine(member, args);
}

function commandLine(spec: CommandSpec, args: string[]): CommandLine {
  if (asksForHelp(args)) return { kind: "help", text: commandHelp(spec) };
  if (!spec.takesArgs && args.length > 0) {
    return usageError(`${nameOf(spec)} takes no arguments (got "${args[0]}")`, `${nameOf(spec)} `);
  }
  return { kind: "run", command: nameOf(spec), args };
}

/** `traitgate help [command...]`. */
function helpFor(words: readonly string[]): CommandLine {
  if (words.length === 0) return { kind: "help", text: generalHelp() };
  return parseCommandLine([...words, "--help"]);
}

/** The message for a usage error found while a command parses its own options. */
export function usageMessage(command: string, problem: string): string {
  return `${command}: ${problem}\nSee 'traitgate ${command} --help'.`;
}
