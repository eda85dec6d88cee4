import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { testBuildDir } from "./build-cli.js";

/**
 * The command line as a user runs it: `traitgate` as its own process, from the sources as
 * the suite's global setup compiled them (test/support/build-cli.ts). Processes started with
 * `startCli` are remembered; `killAll` ends what a failed test left running.
 */

export const cliScript = join(testBuildDir, "src", "cli.js");

/**
 * Node's options for a `traitgate` process in the suites: stack traces into the sources, and
 * WebAssembly compiled by V8's baseline compiler only. PGlite is PostgreSQL in WebAssembly;
 * optimising its hot functions costs a short-lived process more CPU than it saves (a one-shot
 * command ~4.3 -> ~2.9 s of CPU, measured on the 2-core machine). The same code runs either way.
 */
export const cliNodeOptions = ["--enable-source-maps", "--liftoff-only"] as const;
const started: ChildProcess[] = [];

const spawnCli = (args: readonly string[], env: NodeJS.ProcessEnv) =>
  spawn(process.execPath, [...cliNodeOptions, cliScript, ...args], { env });

/** Runs a command to completion, with `stdin` on its standard input. */
export function runCli(args: readonly string[], env: NodeJS.ProcessEnv, stdin = "") {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawnCli(args, env);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => {
      stdout += c;
    });
    child.stderr.on("data", (c: Buffer) => {
      stderr += c;
    });
    child.stdin.end(stdin);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** Starts a long-running command; resolves once `ready` matches its output (both streams). */
export function startCli(args: readonly string[], env: NodeJS.ProcessEnv, ready: RegExp) {
  const child = spawnCli(args, env);
  started.push(child);
  return new Promise<{ child: ChildProcess; output: () => string }>((resolve, reject) => {
    let output = "";
    const onData = (c: Buffer) => {
      output += c;
      if (ready.test(output)) resolve({ child, output: () => output });
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => reject(new Error(`exited with ${code}: ${output}`)));
  });
}

/** The URL a `serve` or `demo` process logged in its "traitgate listening" line. */
export function listeningUrl(output: string): string {
  const line = output.split("\n").find((l) => l.includes("traitgate listening"));
  return line ? (JSON.parse(line) as { url: string }).url : "";
}

/** SIGTERM, then the exit code. */
export async function stopCli(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  child.kill("SIGTERM");
  return exited;
}

/** Kills every process `startCli` started (afterAll). */
export function killAll(): void {
  for (const child of started) child.kill("SIGKILL");
}
