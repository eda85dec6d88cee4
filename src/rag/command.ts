import { ConfigError } from "../config.js";
import { createLogger } from "../log.js";
import { loadRagConfig } from "./config.js";
import { startRagPlugin } from "./plugin.js";
import { RagSetupError } from "./schema.js";

/**
 * `traitgate rag-plugin`: the RAG plugin as its own process. Resolves with the exit code
 * when it cannot start (2: configuration, 1: database); runs until SIGINT or SIGTERM.
 */
export async function runRagPluginCommand(
  env: NodeJS.ProcessEnv,
  stderr: NodeJS.WritableStream,
): Promise<number | undefined> {
  let config: ReturnType<typeof loadRagConfig>;
  try {
    config = loadRagConfig(env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    stderr.write(`traitgate rag-plugin: refusing to start:\n${err.message}\n`);
    return 2;
  }
  const log = createLogger({ level: config.logLevel });
  let plugin: Awaited<ReturnType<typeof startRagPlugin>>;
  try {
    plugin = await startRagPlugin({ config, log });
  } catch (err) {
    if (!(err instanceof RagSetupError)) throw err;
    stderr.write(`traitgate rag-plugin: cannot start: ${err.message}\n`);
    return 1;
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down");
    plugin.close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  return undefined;
}
