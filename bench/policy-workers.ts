import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { freePort } from "./children.js";
import { processCpuMs, processTree } from "./load.js";

/**
 * `traitgate serve --workers N` for the policy service benchmark: the real command
 * (dist/src/cli.js, as `npm run bench` builds it) on a PostgreSQL schema that
 * bench/policy-server.ts set up, with the keys it used, logging at "warn" as the benchmark's
 * single-process server does. At "warn" no worker logs "traitgate listening", so the port is
 * chosen here; `spread` tells which worker holds each of a client's connections (from /proc),
 * which is how the caller waits until every worker takes connections.
 */
export interface WorkersServer {
  url: string;
  /** The primary's process id: the root of the processes whose CPU time is the server's. */
  pid: number;
  /** The workers' process ids now (the primary's children). */
  workerPids(): number[];
  /** For each local port of a connection to the server: the worker holding its other end. */
  owners(localPorts: readonly number[]): (number | undefined)[];
  /** The command's output so far (its warnings and errors). */
  output(): string;
  /** Whether the primary has not exited. */
  running(): boolean;
  /** SIGTERM to the primary (which stops the workers), then its exit; SIGKILL after 15 s. */
  stop(): Promise<void>;
}

export async function startWorkers(options: {
  workers: number;
  connection: string;
  secrets: Record<string, string>;
}): Promise<WorkersServer> {
  const port = await freePort();
  const cli = new URL("../src/cli.js", import.meta.url);
  const child: ChildProcess = spawn(
    process.execPath,
    [cli.pathname, "serve", "--workers", String(options.workers)],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        ...options.secrets,
        DB_CONNECTION: options.connection,
        PORT: String(port),
        HOST: "127.0.0.1",
        LOG_LEVEL: "warn",
      },
    },
  );
  let output = "";
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-100_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // The benchmark ending any way (an error, Ctrl-C) takes the server with it: the primary has
  // no IPC channel to notice its parent gone, and its schema is dropped at the end.
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  void exited.then(() => process.off("exit", killOnExit));
  const pid = child.pid ?? -1;
  return {
    url: `http://127.0.0.1:${port}`,
    pid,
    workerPids: () => processTree(pid).filter((p) => p !== pid),
    owners: (localPorts) => socketOwners(processTree(pid), port, localPorts),
    output: () => output,
    running: () => child.exitCode === null && child.signalCode === null,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Until each worker holds as many of the client's connections as any other (give or take
 * one): `connect` opens the client's connections (a call on each) and returns their local
 * ports, `close` closes them. A worker still starting takes none (node:cluster hands
 * connections to listening workers), so the connections are opened again until spread.
 */
export async function spreadConnections(
  server: WorkersServer,
  workers: number,
  connect: () => Promise<number[]>,
  close: () => void,
  timeoutMs = 60_000,
): Promise<Map<number, number>> {
  const deadline = performance.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const ports = await connect();
      const perWorker = new Map<number, number>();
      for (const owner of server.owners(ports)) {
        if (owner !== undefined) perWorker.set(owner, (perWorker.get(owner) ?? 0) + 1);
      }
      const counts = [...perWorker.values()];
      const spread =
        perWorker.size === Math.min(workers, ports.length) &&
        Math.max(...counts) - Math.min(...counts) <= 1;
      if (spread) return perWorker;
      last = `connections per worker ${JSON.stringify([...perWorker])}`;
    } catch (err) {
      last = (err as Error).message;
    }
    close();
    if (!server.running() || server.output().includes("worker died")) {
      throw new Error(
        `serve --workers ${workers} exited or lost a worker: ${server.output().slice(-2000)}`,
      );
    }
    if (performance.now() > deadline) {
      throw new Error(
        `serve --workers ${workers}: connections not spread over the workers within ${timeoutMs} ms (${last}); output: ${server.output().slice(-2000)}`,
      );
    }
    await sleep(250);
  }
}

/**
 * DB_CONNECTION for a `traitgate` process confined to `schema` of the server at `url`: its
 * search_path set in the connection's options.
 */
export function schemaConnection(url: string, schema: string): string {
  const options = encodeURIComponent(`-c search_path=${schema}`);
  return `${url}${url.includes("?") ? "&" : "?"}options=${options}`;
}

/** CPU time (ms) of each process given, by pid. */
export function cpuByProcess(pids: readonly number[]): Map<number, number> {
  return new Map(pids.map((p) => [p, processCpuMs(p)]));
}

/**
 * Which of `pids` holds the server's end of each loopback connection from `localPorts` to
 * `serverPort`: the socket's inode from /proc/net/tcp, then the process with it among its
 * file descriptors (Linux).
 */
function socketOwners(
  pids: readonly number[],
  serverPort: number,
  localPorts: readonly number[],
): (number | undefined)[] {
  const inodeOf = new Map<number, string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      const [local, remote, inode] = [f[1], f[2], f[9]];
      if (local === undefined || remote === undefined || inode === undefined) continue;
      const portOf = (address: string) => Number.parseInt(address.slice(-4), 16);
      if (portOf(local) === serverPort) inodeOf.set(portOf(remote), inode);
    }
  }
  const holder = new Map<string, number>();
  for (const pid of pids) {
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
        if (target.startsWith("socket:[")) holder.set(target.slice(8, -1), pid);
      } catch {
        // Closed while listed.
      }
    }
  }
  return localPorts.map((p) => {
    const inode = inodeOf.get(p);
    return inode === undefined ? undefined : holder.get(inode);
  });
}
