import { mkdirSync, unlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { type DestinationStream, pino } from "pino";
import { createLogger, type Logger, type LogLevel } from "./log.js";

/**
 * The log's handlers (docs/operations.md, "Logs"): the console (stdout) always, and a file
 * when LOG_FILE is set, rotated by size and optionally every day or hour by pino-roll, in a
 * worker thread. Both get the same lines: pino writes each line once, in this thread,
 * redacted (src/log.ts) before it is handed to either handler, so no unredacted byte
 * reaches the worker. Both follow the root logger's level, which the `log_level` setting
 * changes while the process runs (src/settings/log-level.ts).
 */

export interface LogFileConfig {
  /** LOG_FILE: e.g. /var/log/traitgate/traitgate.log; written as traitgate.1.log, .2.log … */
  path: string;
  /** LOG_FILE_MAX_SIZE: a new file once the current one reaches this many bytes. */
  maxBytes: number;
  /** LOG_FILE_FREQUENCY: also a new file every day or hour; undefined: by size only. */
  frequency: "daily" | "hourly" | undefined;
  /** LOG_FILE_KEEP: files kept besides the current one (older ones are removed). */
  keep: number;
}

const sizeUnits: Record<string, number> = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 };

/** Reads LOG_FILE and its rotation settings; undefined when LOG_FILE is unset. */
export function logFileConfig(
  env: NodeJS.ProcessEnv,
  problems: string[],
): LogFileConfig | undefined {
  const path = env.LOG_FILE?.trim() || undefined;
  const rotation = ["LOG_FILE_MAX_SIZE", "LOG_FILE_FREQUENCY", "LOG_FILE_KEEP"];
  if (path === undefined) {
    for (const name of rotation) if (env[name]?.trim()) problems.push(`${name} needs LOG_FILE`);
    return undefined;
  }
  const rawSize = env.LOG_FILE_MAX_SIZE?.trim() || "100m";
  const size = /^(\d+)([kmg]?)$/i.exec(rawSize);
  const maxBytes = size ? Number(size[1]) * (sizeUnits[size[2]!.toLowerCase()] ?? 1) : 0;
  if (maxBytes < 1024) {
    problems.push(
      `LOG_FILE_MAX_SIZE must be a size of at least 1k: bytes, or a number with k, m or g (got "${rawSize}")`,
    );
  }
  const rawFrequency = env.LOG_FILE_FREQUENCY?.trim().toLowerCase() || undefined;
  if (rawFrequency !== undefined && rawFrequency !== "daily" && rawFrequency !== "hourly") {
    problems.push(`LOG_FILE_FREQUENCY must be daily or hourly (got "${env.LOG_FILE_FREQUENCY}")`);
  }
  const rawKeep = env.LOG_FILE_KEEP?.trim() || "10";
  const keep = Number(rawKeep);
  if (!Number.isInteger(keep) || keep < 1 || keep > 1000) {
    problems.push(`LOG_FILE_KEEP must be an integer from 1 to 1000 (got "${rawKeep}")`);
  }
  return {
    path,
    maxBytes,
    frequency: rawFrequency === "daily" || rawFrequency === "hourly" ? rawFrequency : undefined,
    keep,
  };
}

export interface LogHandlers {
  log: Logger;
  /** Ends the file handler once every line written so far is in the file. */
  close(): Promise<void>;
}

export interface LogHandlerOptions {
  level: LogLevel;
  file?: LogFileConfig | undefined;
  /** The console handler's stream (default stdout); tests pass a capturing one. */
  console?: DestinationStream;
}

/** How long close() waits for the file handler to write what it holds. */
const closeTimeoutMs = 5000;

/**
 * Opens the handlers; with a file, rejects (naming LOG_FILE) when its folder cannot be made
 * or written, and resolves once the file's worker thread runs.
 */
export async function openLogHandlers(options: LogHandlerOptions): Promise<LogHandlers> {
  const consoleStream = options.console ?? pino.destination({ dest: 1, sync: true });
  const { file } = options;
  if (file === undefined) {
    return {
      log: createLogger({ level: options.level, destination: consoleStream }),
      close: async () => {},
    };
  }
  // Checked here, at start: the worker reports an unwritable file only after it is running.
  try {
    const folder = dirname(file.path);
    mkdirSync(folder, { recursive: true });
    const probe = join(folder, `.traitgate-log-check-${process.pid}`);
    writeFileSync(probe, "");
    unlinkSync(probe);
  } catch (err) {
    throw new Error(`LOG_FILE ${file.path} cannot be written: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const transport = pino.transport({
    // Resolved here: the worker does not share this module's resolution.
    target: createRequire(import.meta.url).resolve("pino-roll"),
    options: {
      file: file.path,
      size: `${file.maxBytes}b`,
      ...(file.frequency ? { frequency: file.frequency } : {}),
      limit: { count: file.keep, removeOtherLogFiles: true },
      mkdir: true,
    },
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) =>
      reject(new Error(`LOG_FILE ${file.path} cannot be written: ${err.message}`, { cause: err }));
    transport.once("error", onError);
    transport.once("ready", () => {
      transport.off("error", onError);
      resolve();
    });
  });
  // Once the file fails (a full disk, a removed folder), lines go to the console only; the
  // failure is said there once, never through the logger (whose lines would fail again).
  let failed = false;
  transport.on("error", (err: Error) => {
    if (failed) return;
    failed = true;
    consoleStream.write(
      `${JSON.stringify({ level: "error", time: new Date().toISOString(), service: "traitgate", error: err.message, msg: "the log file handler failed: lines go to the console only" })}\n`,
    );
  });
  const fileStream = {
    write: (line: string) => {
      if (!failed) transport.write(line);
    },
  };
  // Every line the root logger lets through reaches both: the handlers filter nothing.
  const destination = pino.multistream([
    { level: "trace", stream: consoleStream },
    { level: "trace", stream: fileStream },
  ]);
  const log = createLogger({ level: options.level, destination });
  let ended = false;
  return {
    log,
    close: () =>
      new Promise<void>((resolve) => {
        if (failed || ended) return resolve();
        ended = true;
        const timer = setTimeout(resolve, closeTimeoutMs);
        timer.unref();
        transport.once("close", () => {
          clearTimeout(timer);
          resolve();
        });
        transport.end();
      }),
  };
}
