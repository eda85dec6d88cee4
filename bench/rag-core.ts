import { randomBytes } from "node:crypto";
import { loadConfig } from "../src/config.js";
import { createLogger } from "../src/log.js";
import { startCore } from "../src/platform.js";

/**
 * The core of the ingestion benchmark (bench/rag-ingest.ts), as its own process: `startCore`
 * as `traitgate serve` does, on the embedded database in DATA_DIR, with an admin user and an
 * API key that may set up a plugin and the settings. Prints one JSON line `{url, password,
 * apiKey}` and runs until SIGTERM (NODE_OPTIONS such as --cpu-prof pass through).
 */

const { config } = loadConfig(process.env);
const log = createLogger({ level: config.logLevel });
const core = await startCore({ config, log });
const password = randomBytes(18).toString("base64url");
await core.identity.createUser({ username: "bench-admin", email: "", password, roles: ["admin"] });
const { key } = await core.apiKeys.create(
  { type: "system" },
  { requestId: null },
  {
    name: "ingest bench",
    scopes: [
      "plugins:read",
      "plugins:write",
      "operator:read",
      "operator:write",
      "service_accounts:write",
      "settings:write",
    ],
    expiresAt: undefined,
  },
);
process.stdout.write(
  `${JSON.stringify({ benchCore: true, url: core.server.url, password, apiKey: key })}\n`,
);

let stopping = false;
// SIGINT too: Ctrl-C reaches the whole process group, this process included.
const stop = () => {
  if (stopping) return;
  stopping = true;
  void core.close().then(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
