import cluster, { type Worker } from "node:cluster";
import type { Logger } from "./log.js";

/**
 * `traitgate serve --workers N` (docs/operations.md, "Several replicas"): this process, the
 * primary, forks N workers that each run the whole core and share its port (node:cluster hands
 * connections out in turn). Each worker is a replica like any other on the same PostgreSQL
 * database: caches per process, kept coherent through the database. The primary serves no
 * call and opens no database; it keeps N workers running and stops them.
 *
 * - A worker that dies (for any reason but a stop) is logged and forked again after a backoff
 *   that doubles with each death in a row (`minBackoffMs` up to `maxBackoffMs`) and starts
 *   over once a worker has run `stableAfterMs`.
 * - SIGTERM or SIGINT to the primary: each worker gets SIGTERM and drains as a single `serve`
 *   does; the primary exits 0 once every worker has exited 0, 1 if one did not.
 */

/** `--workers`: 1 to this many. */
export const maxWorkers = 64;

/** Parses `--workers`'s value; throws a message naming the flag. */
export function parseWorkerCount(raw: string): number {
  const n = /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : Number.NaN;
  if (!Number.isInteger(n) || n < 1 || n > maxWorkers) {
    throw new Error(`--workers must be an integer from 1 to ${maxWorkers} (got "${raw}")`);
  }
  return n;
}

export interface SuperviseOptions {
  workers: number;
  log: Logger;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  stableAfterMs?: number;
}

/**
 * How long to wait before forking again a worker that died after running `ranMs`, its slot's
 * previous wait being `previousMs` (undefined: none died before): the minimum after a worker
 * that had run `stableAfterMs`, else double the previous wait, at most the maximum.
 */
export function nextBackoff(
  previousMs: number | undefined,
  ranMs: number,
  limits: { minBackoffMs: number; maxBackoffMs: number; stableAfterMs: number },
): number {
  if (previousMs === undefined || ranMs >= limits.stableAfterMs) return limits.minBackoffMs;
  return Math.min(previousMs * 2, limits.maxBackoffMs);
}

/** The worker's number (1..N, kept by its replacements), given to it in its environment. */
export const workerSlotVariable = "TRAITGATE_WORKER";

const slots = new WeakMap<Worker, number>();

/** In the primary: a worker's number (1..N), for lines that name it. */
export function workerSlot(worker: Worker): number | undefined {
  return slots.get(worker);
}

/** Runs the primary until it is told to stop; resolves with its exit code. */
export function superviseWorkers(options: SuperviseOptions): Promise<number> {
  const { log } = options;
  const minBackoffMs = options.minBackoffMs ?? 1_000;
  const maxBackoffMs = options.maxBackoffMs ?? 30_000;
  const stableAfterMs = options.stableAfterMs ?? 30_000;
  const running = new Map<Worker, { slot: number; startedAt: number }>();
  const backoff = new Map<number, number>();
  const timers = new Set<NodeJS.Timeout>();
  let stopping = false;
  let failedStop = false;

  return new Promise<number>((resolve) => {
    const fork = (slot: number) => {
      const worker = cluster.fork({ [workerSlotVariable]: String(slot) });
      slots.set(worker, slot);
      running.set(worker, { slot, startedAt: Date.now() });
      worker.on("exit", (code, signal) => {
        const state = running.get(worker);
        running.delete(worker);
        if (stopping) {
          // Killed by the SIGTERM it was sent (before it could handle it, e.g. while starting)
          // is a stop too.
          if (code !== 0 && signal !== "SIGTERM") failedStop = true;
          if (running.size === 0) finish();
          return;
        }
        if (state === undefined) return;
        const delayMs = nextBackoff(backoff.get(slot), Date.now() - state.startedAt, {
          minBackoffMs,
          maxBackoffMs,
          stableAfterMs,
        });
        backoff.set(slot, delayMs);
        log.error(
          { worker: slot, worker_pid: worker.process.pid, code, signal, restart_in_ms: delayMs },
          "worker died; restarting it",
        );
        const timer = setTimeout(() => {
          timers.delete(timer);
          if (!stopping) fork(slot);
        }, delayMs);
        timers.add(timer);
      });
    };

    const finish = () => {
      log.info({ failed: failedStop }, "stopped");
      resolve(failedStop ? 1 : 0);
    };

    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      log.info({ signal, workers: running.size }, "shutting down");
      if (running.size === 0) return finish();
      for (const worker of running.keys()) worker.process.kill("SIGTERM");
    };
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));

    log.info({ workers: options.workers, pid: process.pid }, "starting workers");
    for (let slot = 1; slot <= options.workers; slot++) fork(slot);
  });
}
