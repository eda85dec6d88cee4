// The steps after `docker compose up` (docs/containers.md): the spec's setup sequence for the
// RAG plugin, run inside the core's container (or beside any `traitgate serve`):
//   1. an API key with plugins:write, operator:write and settings:write (traitgate apikeys
//      create, valid one day) unless TRAITGATE_API_KEY holds one;
//   2. the service account ai-core, the caller the core's search uses (traitgate
//      service-accounts create), unless it exists;
//   3. the plugin registered (POST /admin/plugins; if registered already: its manifest updated
//      and its secrets rotated), which answers the plugin's core secret;
//   4. the allowlist entry ai-core -> plugin for rag_index, rag_index_batch and rag_query;
//   5. the settings rag.backend = plugin, rag.plugin_id = the plugin.
// Stdout gets one line, `CORE_SECRET=tgc_…`, for .env (the plugin's container reads it);
// everything else goes to stderr. The administrator signs in with TRAITGATE_TOKEN (an access
// token), or as --username with the password in TRAITGATE_PASSWORD or on the first line of
// standard input (never on the command line). Exit 0 done, 1 failed, 2 usage.
import { spawnSync } from "node:child_process";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

const usage = `Usage: node scripts/setup-rag.mjs [--username NAME] [--plugin-id ID]
       [--plugin-host HOST] [--plugin-port PORT] [--url URL]

  --username NAME      The administrator who signs in (default admin).
  --plugin-id ID       The plugin's id (default rag).
  --plugin-host HOST   Where the core reaches the plugin (default rag-plugin, compose's name).
  --plugin-port PORT   Its port (default 8080).
  --url URL            The core (default http://127.0.0.1:$PORT, this container's own).

Environment: TRAITGATE_TOKEN or TRAITGATE_PASSWORD (else stdin), TRAITGATE_API_KEY (else a
key is created with the CLI, which uses DB_CONNECTION like the core), TRAITGATE_CLI (the CLI
script; default dist/src/cli.js). Prints CORE_SECRET=….`;

const log = (line) => process.stderr.write(`setup-rag: ${line}\n`);

function fail(message, code = 1) {
  log(message);
  process.exit(code);
}

let options;
try {
  ({ values: options } = parseArgs({
    options: {
      username: { type: "string", default: "admin" },
      "plugin-id": { type: "string", default: "rag" },
      "plugin-host": { type: "string", default: "rag-plugin" },
      "plugin-port": { type: "string", default: "8080" },
      url: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (err) {
  fail(`${err.message}\n${usage}`, 2);
}
if (options.help) {
  process.stdout.write(`${usage}\n`);
  process.exit(0);
}
const pluginPort = Number(options["plugin-port"]);
if (!Number.isInteger(pluginPort) || pluginPort < 1 || pluginPort > 65535) {
  fail(`--plugin-port must be a port number (got "${options["plugin-port"]}")`, 2);
}
const core = (options.url ?? `http://127.0.0.1:${process.env.PORT?.trim() || "8080"}`).replace(
  /\/$/,
  "",
);
const pluginId = options["plugin-id"];
// The traitgate CLI: dist/src/cli.js of this package (TRAITGATE_CLI: another build of it, as tests use).
const cli =
  process.env.TRAITGATE_CLI?.trim() || new URL("../dist/src/cli.js", import.meta.url).pathname;

/** `traitgate <args>` as its own process; its stdout, or undefined when it failed. */
function traitgate(args, { okWhen } = {}) {
  const run = spawnSync(process.execPath, [cli, ...args], { encoding: "utf8" });
  if (run.status === 0) return run.stdout.trim();
  if (okWhen?.test(run.stderr)) return undefined;
  fail(`traitgate ${args.slice(0, 2).join(" ")} failed (exit ${run.status}):\n${run.stderr}`);
}

async function call(method, path, token, apiKey, body) {
  const res = await fetch(`${core}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(apiKey ? { "x-api-key": apiKey } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((err) => fail(`cannot reach the core at ${core}: ${err.message}`));
  const answer = await res.json().catch(() => ({}));
  return { status: res.status, answer };
}

const reasonOf = (answer) => answer?.details?.[0]?.reason ?? answer?.code ?? "";

function check(step, { status, answer }) {
  if (status >= 200 && status < 300) return answer;
  fail(`${step}: HTTP ${status} ${reasonOf(answer)}: ${answer?.message ?? ""}`);
}

async function firstLineOfStdin() {
  if (process.stdin.isTTY) process.stderr.write("password: ");
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    rl.close();
    return line;
  }
  return undefined;
}

async function accessToken() {
  const given = process.env.TRAITGATE_TOKEN?.trim();
  if (given) return given;
  const password = process.env.TRAITGATE_PASSWORD || (await firstLineOfStdin());
  if (!password) fail("no password: set TRAITGATE_PASSWORD or write it on standard input", 2);
  const login = await call("POST", "/auth/login", undefined, undefined, {
    username: options.username,
    password,
  });
  const answer = check(`login as ${options.username}`, login);
  if (!answer.token || answer.mfa_required) {
    fail("this administrator needs a second factor: sign in elsewhere, pass TRAITGATE_TOKEN");
  }
  return answer.token;
}

const token = await accessToken();

const apiKey =
  process.env.TRAITGATE_API_KEY?.trim() ||
  traitgate([
    "apikeys",
    "create",
    "--name",
    `setup-${pluginId}`,
    "--scope",
    "plugins:write",
    "--scope",
    "operator:write",
    "--scope",
    "settings:write",
    "--expires-in-days",
    "1",
  ]);
if (!process.env.TRAITGATE_API_KEY?.trim())
  log("created an API key for this setup (expires in a day)");

const accountSecret = traitgate(
  ["service-accounts", "create", "--name", "ai-core", "--role", "service"],
  { okWhen: /exist/i },
);
if (accountSecret === undefined) log("service account ai-core: exists already");
else log(`service account ai-core created; its client secret (shown once):\n${accountSecret}`);

const manifest = {
  id: pluginId,
  name: "RAG plugin",
  plugin_type: "retrieval",
  // rag_index_batch: a request's documents of one class in one call and one transaction
  // (docs/rag.md); the core uses it only when the manifest declares it and ai-core may call it.
  endpoints: {
    rag_index: "/rag/index",
    rag_index_batch: "/rag/index-batch",
    rag_query: "/rag/query",
  },
  host: options["plugin-host"],
  port: pluginPort,
  // The plugin stores health records: it is declared in HIPAA scope (as the demo's).
  traits: ["compliance:hipaa"],
};
let registered = await call("POST", "/admin/plugins", token, apiKey, manifest);
if (registered.status === 409) {
  check(
    "update the plugin",
    await call("PUT", `/admin/plugins/${pluginId}`, token, apiKey, manifest),
  );
  registered = await call(
    "POST",
    `/admin/plugins/${pluginId}:rotate-credentials`,
    token,
    apiKey,
    {},
  );
  log(`plugin ${pluginId}: registered already; manifest updated, secrets rotated`);
} else {
  log(`plugin ${pluginId}: registered (${manifest.host}:${manifest.port})`);
}
const coreSecret = check("register the plugin", registered).credentials?.core_secret;
if (!coreSecret) fail("the core's answer carries no core_secret");

check(
  "allowlist ai-core",
  await call("PUT", "/admin/operator/allowlist", token, apiKey, {
    caller: "ai-core",
    target: pluginId,
    operations: ["rag_index", "rag_index_batch", "rag_query"],
  }),
);
log(`allowlist: ai-core -> ${pluginId} for rag_index, rag_index_batch, rag_query`);

check(
  "choose the plugin backend",
  await call("POST", "/api/admin/settings", token, apiKey, {
    "rag.backend": "plugin",
    "rag.plugin_id": pluginId,
  }),
);
log(`settings: rag.backend = plugin, rag.plugin_id = ${pluginId}`);
log("next: start the plugin with this CORE_SECRET (docker compose --profile rag up -d)");
process.stdout.write(`CORE_SECRET=${coreSecret}\n`);
