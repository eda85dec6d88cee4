import { execFile, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { promisify } from "node:util";

/**
 * A private PostgreSQL 15 cluster for fault tests (never the shared server on 5432): created
 * with pg_createcluster on a free port, trusted on localhost, and dropped when the suite ends.
 * It can be frozen (SIGSTOP to the postmaster and its children: connections are accepted by
 * the kernel but nothing answers), resumed, stopped and started again.
 *
 * Clusters are named `tgtest_<pid>_<random>`. A run that dies before its cleanup leaves its
 * cluster behind; the next `createPgCluster` on this machine drops every such cluster whose
 * process is gone, and a process exit handler drops this process's clusters as well.
 */
export interface PgCluster {
  name: string;
  port: number;
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  url: string;
  /** SIGSTOP the postmaster, then every child it has. */
  freeze(): Promise<void>;
  /** SIGCONT the children and the postmaster. */
  resume(): Promise<void>;
  /** pg_ctlcluster stop (waits until it is down). */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Resumes if frozen, then pg_dropcluster --stop. Idempotent. */
  drop(): Promise<void>;
}

const run = promisify(execFile);
const version = "15";
const prefix = "tgtest_";

/**
 * Whether this machine can make private clusters. Outside CI a missing pg_createcluster skips
 * the suite with a message naming it; in CI (CI=true) it is an error.
 */
export function privateClustersAvailable(suite: string): boolean {
  const path = (process.env.PATH ?? "/usr/bin").split(":");
  if (path.some((dir) => dir !== "" && existsSync(`${dir}/pg_createcluster`))) return true;
  if (process.env.CI) {
    throw new Error(`${suite}: pg_createcluster is missing, and in CI this suite must run`);
  }
  console.warn(
    `${suite}: skipped, pg_createcluster (postgresql-common with PostgreSQL ${version}) is not installed`,
  );
  return false;
}

const dataDir = (name: string) => `/var/lib/postgresql/${version}/${name}`;

function postmasterPid(name: string): number | undefined {
  try {
    const pid = Number(readFileSync(`${dataDir(name)}/postmaster.pid`, "utf8").split("\n")[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return execFileSync("pgrep", ["-P", String(pid)], { encoding: "utf8" })
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map(Number);
  } catch {
    return []; // pgrep exits 1 when there are none
  }
}

function signal(pids: number[], sig: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // gone meanwhile
    }
  }
}

/**
 * How a cluster that is dropped is stopped: immediately (its data is thrown away), with
 * pg_ctl's wait bounded. Not the fast mode of `pg_dropcluster --stop`: PostgreSQL 15 can miss a
 * fast shutdown request that arrives while it restarts after a backend crashed (the
 * postmaster keeps waiting for its checkpointer, which it never asks to stop), and pg_ctl then
 * waits its full minute, twice with a retry.
 */
const immediateStop = [version, "", "stop", "-m", "immediate", "--", "-t", "10"];
const stopArgs = (name: string) => immediateStop.map((arg, i) => (i === 1 ? name : arg));

/** SIGCONT to a cluster's processes, then stop and drop it; synchronous, for exit handlers too. */
function dropNow(name: string): void {
  const pid = postmasterPid(name);
  if (pid !== undefined) signal([...childrenOf(pid), pid], "SIGCONT");
  try {
    execFileSync("pg_ctlcluster", stopArgs(name), { stdio: "ignore" });
  } catch {
    // not running
  }
  const left = postmasterPid(name);
  if (left !== undefined) {
    signal([...childrenOf(left), left], "SIGKILL");
    // pg_dropcluster refuses a cluster whose postmaster still runs: wait (≤ 5 s) for it to go.
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < 100 && alive(left); i++) Atomics.wait(pause, 0, 0, 50);
  }
  try {
    execFileSync("pg_dropcluster", [version, name], { stdio: "ignore" });
  } catch {
    // already gone
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
};

/** Drops the clusters of test processes that no longer exist. */
async function dropLeftovers(): Promise<void> {
  const { stdout } = await run("pg_lsclusters", ["-h"]);
  for (const line of stdout.split("\n")) {
    const [ver, name] = line.trim().split(/\s+/);
    if (ver !== version || !name?.startsWith(prefix)) continue;
    const owner = Number(name.slice(prefix.length).split("_")[0]);
    if (Number.isInteger(owner) && owner > 0 && !alive(owner)) dropNow(name);
  }
}

const mine = new Set<string>();
let exitHandler = false;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address
          ? resolve(address.port)
          : reject(new Error("no port")),
      );
    });
  });
}

export async function createPgCluster(): Promise<PgCluster> {
  await dropLeftovers();
  if (!exitHandler) {
    exitHandler = true;
    process.on("exit", () => {
      for (const name of mine) dropNow(name);
    });
  }
  const name = `${prefix}${process.pid}_${randomBytes(4).toString("hex")}`;
  const port = await freePort();
  mine.add(name);
  await run("pg_createcluster", [
    version,
    name,
    "-p",
    String(port),
    "--",
    "--auth-host=trust",
    "--auth-local=trust",
    "--no-sync",
  ]);
  await run("pg_ctlcluster", [version, name, "start"]);
  let frozen: number[] = [];

  return {
    name,
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async freeze() {
      const pid = postmasterPid(name);
      if (pid === undefined) throw new Error(`cluster ${name} is not running`);
      // The postmaster first, so that it forks no child after the list is taken.
      signal([pid], "SIGSTOP");
      frozen = [pid, ...childrenOf(pid)];
      signal(frozen.slice(1), "SIGSTOP");
    },
    async resume() {
      signal(frozen.slice(1), "SIGCONT");
      signal(frozen.slice(0, 1), "SIGCONT");
      frozen = [];
    },
    async stop() {
      await run("pg_ctlcluster", [version, name, "stop"]);
    },
    async start() {
      await run("pg_ctlcluster", [version, name, "start"]);
    },
    async drop() {
      if (!mine.has(name)) return;
      mine.delete(name);
      signal(frozen, "SIGCONT");
      frozen = [];
      await run("pg_ctlcluster", stopArgs(name)).catch(() => {});
      await run("pg_dropcluster", [version, name]).catch(() => dropNow(name));
    },
  };
}
