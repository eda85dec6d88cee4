import { type ChildProcess, spawn } from "node:child_process";
import { createServer } from "node:net";
import { onInterrupt } from "./interrupt.js";

/** The benchmarks' child processes (servers, plugins, proxies) and their JSON set-up calls. */

export interface Child {
  child: ChildProcess;
  output: () => string;
}

export function startChild(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: RegExp | undefined,
  timeoutMs = 60_000,
): Promise<Child & { match: RegExpExecArray | null }> {
  const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  // An interrupted run stops it (it drops what it made on SIGTERM) before exiting.
  const forget = onInterrupt(() => stopChild({ child, output: () => output }, 5_000));
  child.once("exit", forget);
  if (ready === undefined) {
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stdout?.resume();
    return Promise.resolve({ child, match: null, output: () => output });
  }
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} did not start in time: ${output.slice(-2000)}`));
    }, timeoutMs);
    let started = false;
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.length > 1_000_000) output = output.slice(-100_000);
      // Once started, only kept (the core's access lines arrive with every call: matching
      // the whole output again on each would cost this process, the load generator, CPU
      // per call).
      if (started) return;
      const match = ready.exec(output);
      if (match) {
        started = true;
        clearTimeout(timer);
        resolve({ child, match, output: () => output });
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited with ${code}: ${output.slice(-2000)}`));
    });
  });
}

/** SIGTERM, then SIGKILL after `killAfterMs` if it has not exited. */
export async function stopChild(c: Child | undefined, killAfterMs = 15_000): Promise<void> {
  if (c === undefined || c.child.exitCode !== null || c.child.signalCode !== null) return;
  const exited = new Promise((r) => c.child.once("exit", r));
  c.child.kill("SIGTERM");
  const timer = setTimeout(() => c.child.kill("SIGKILL"), killAfterMs);
  await exited;
  clearTimeout(timer);
}

/** A JSON call that must answer 200; its answer. */
export async function postJson(
  url: string,
  path: string,
  body: unknown,
  headers: Record<string, string>,
  method = "POST",
): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const answer = (await res.json()) as Record<string, unknown>;
  if (res.status !== 200)
    throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(answer)}`);
  return answer;
}

/** Core, plugin and nginx, set up as docs/operator-lane.md says (register, start, allowlist). */

/** A TCP port on loopback that nothing listens on now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  await new Promise<void>((r) => server.close(() => r()));
  if (address === null || typeof address === "string") throw new Error("no free port");
  return address.port;
}
