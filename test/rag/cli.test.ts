import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cliNodeOptions, cliScript } from "../support/cli.js";

/** `traitgate rag-plugin` as an operator runs it: its own process, through the CLI. */

const secret = `tgc_${"k".repeat(43)}`;
const dirs: string[] = [];
const children: ChildProcess[] = [];

afterAll(() => {
  for (const child of children) child.kill("SIGKILL");
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function env(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-rag-"));
  dirs.push(dir);
  return {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATA_DIR: dir,
    PORT: "0",
    HOST: "127.0.0.1",
    EMBEDDING_DIM: "32",
    ...extra,
  };
}

function spawnCli(environment: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [...cliNodeOptions, cliScript, "rag-plugin"], {
    env: environment,
  });
  children.push(child);
  let output = "";
  child.stdout.on("data", (c: Buffer) => {
    output += c;
  });
  child.stderr.on("data", (c: Buffer) => {
    output += c;
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  return { child, exited, output: () => output };
}

describe("traitgate rag-plugin", () => {
  it("serves only the core's secret", async () => {
    const run = spawnCli(env({ CORE_SECRET: secret }));
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setInterval(() => {
        const match = /"url":"(http:\/\/[^"]+)"[^\n]*rag-plugin listening/.exec(run.output());
        if (match?.[1]) {
          clearInterval(timer);
          resolve(match[1]);
        }
      }, 50);
      run.exited.then((code) => {
        clearInterval(timer);
        reject(new Error(`exited with ${code}: ${run.output()}`));
      });
    });
    const query = (authorization?: string) =>
      fetch(`${url}/rag/query`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(authorization ? { authorization } : {}),
        },
        body: JSON.stringify({ q: "anything", user_traits: [] }),
      });
    expect((await query()).status).toBe(401);
    expect((await query("Bearer tgc_not-the-secret")).status).toBe(401);
    const ok = await query(`Bearer ${secret}`);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ items: [] });
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    expect(run.output()).not.toContain(secret);
  });

  it("refuses to start without CORE_SECRET", async () => {
    const run = spawnCli(env({}));
    expect(await run.exited).toBe(2);
    expect(run.output()).toContain("CORE_SECRET");
  });

  it("stops on PostgreSQL without pgvector, saying so and how to install it", async () => {
    const url = process.env.TEST_DATABASE_URL?.trim() || "postgres://postgres@127.0.0.1:5432/test";
    const run = spawnCli(env({ CORE_SECRET: secret, DB_CONNECTION: url }));
    expect(await run.exited).toBe(1);
    const output = run.output();
    expect(output).toContain('extension "vector" (pgvector)');
    expect(output).toContain("CREATE EXTENSION vector");
    expect(output).toContain("Install pgvector");
  });
});
