#!/usr/bin/env node
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { exitCodes, parseCommandLine } from "./cli-usage.js";
import { packageRoot } from "./package-root.js";

/**
 * `traitgate`'s entry point: help, the version and usage errors are answered from the
 * command table alone; the commands' code (src/cli-commands.ts) is loaded only to run one.
 */

/** The package's version, from its package.json. */
function packageVersion(): string {
  const json = JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8")) as {
    version?: string;
  };
  return json.version ?? "unknown";
}

async function main(argv: string[]): Promise<void> {
  const line = parseCommandLine(argv);
  switch (line.kind) {
    case "help":
      process.stdout.write(`${line.text}\n`);
      return;
    case "version":
      process.stdout.write(`traitgate ${packageVersion()}\n`);
      return;
    case "usage-error":
      process.stderr.write(`traitgate: ${line.message}\n`);
      process.exit(exitCodes.usage);
      return;
    case "run": {
      const { run } = await import("./cli-commands.js");
      return run(line.command, line.args);
    }
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(`traitgate: ${message}\n`);
  process.exit(exitCodes.failure);
});
