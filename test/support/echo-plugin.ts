import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";

/** examples/echo-plugin as a real separate process, as an operator would run it. */
export interface EchoPlugin {
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

const script = join(import.meta.dirname, "../../examples/echo-plugin/server.mjs");

export function startEchoPlugin(coreSecret: string, port = 0): Promise<EchoPlugin> {
  const child = spawn(process.execPath, [script], {
    env: { PATH: process.env.PATH, CORE_SECRET: coreSecret, PORT: String(port) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let output = "";
    const onData = (chunk: Buffer) => {
      output += chunk;
      const match = /echo-plugin listening on (\d+)/.exec(output);
      if (match) {
        child.stdout?.off("data", onData);
        resolve({
          port: Number(match[1]),
          process: child,
          stop: () =>
            new Promise<void>((done) => {
              if (child.exitCode !== null) return done();
              child.once("exit", () => done());
              child.kill("SIGTERM");
            }),
        });
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (c: Buffer) => {
      output += c;
    });
    child.once("exit", (code) => reject(new Error(`echo plugin exited with ${code}: ${output}`)));
  });
}
