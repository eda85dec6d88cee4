/**
 * What a benchmark must undo when the run is interrupted (SIGINT, SIGTERM) before its own
 * `finally` can: schemas and databases it made on the shared PostgreSQL, child processes it
 * started (each stopped with SIGTERM, on which they drop what they made). Without it, an
 * interrupted `npm run bench` left its schemas behind. The undos run together, bounded by
 * 10 s; then the process exits as the signal would have ended it (128 + its number). An undo
 * registered after the signal (by work still under way) runs at once; a second signal is
 * ignored. The benchmarks' own servers handle SIGINT themselves too, since Ctrl-C reaches the
 * whole process group; forked ones also clean up when their IPC channel closes.
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

type Undo = () => unknown;

const timeoutMs = 10_000;
const pending = new Set<Undo>();
const running: Promise<unknown>[] = [];
let installed = false;
let signalled: NodeJS.Signals | undefined;

/** Whether the run was interrupted: `npm run bench` starts no further benchmark then. */
export const interrupted = (): boolean => signalled !== undefined;

/** Registers `undo` until the returned function is called (from the benchmark's `finally`). */
export function onInterrupt(undo: Undo): () => void {
  install();
  if (signalled !== undefined) {
    running.push(Promise.resolve().then(undo));
    return () => {};
  }
  pending.add(undo);
  return () => {
    pending.delete(undo);
  };
}

function install(): void {
  if (installed) return;
  installed = true;
  const codes = { SIGINT: 130, SIGTERM: 143 } as const;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      if (signalled !== undefined) return;
      signalled = signal;
      process.stderr.write(`benchmark interrupted (${signal}): undoing what it made\n`);
      running.push(...[...pending].map((undo) => Promise.resolve().then(undo)));
      pending.clear();
      const deadline = Date.now() + timeoutMs;
      // Undos registered while these run join them; the deadline bounds them all.
      const settle = async (): Promise<void> => {
        for (let seen = 0; seen < running.length; ) {
          const batch = running.slice(seen);
          seen = running.length;
          const left = deadline - Date.now();
          if (left <= 0) return;
          await Promise.race([
            Promise.allSettled(batch),
            new Promise((resolve) => setTimeout(resolve, left)),
          ]);
        }
      };
      void settle().then(() => process.exit(codes[signal]));
    });
  }
}

/** A temporary directory, removed by `remove()` or when the run is interrupted. */
export function temporaryDir(prefix: string): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  const forget = onInterrupt(removeDir);
  return {
    dir,
    remove() {
      forget();
      removeDir();
    },
  };
}
