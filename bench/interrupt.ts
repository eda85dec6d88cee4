/**
 * What a benchmark must undo when the run is interrupted (SIGINT, SIGTERM) before its own
 * `finally` can: schemas and databases it made on the shared PostgreSQL, child processes it
 * started (each stopped with SIGTERM, on which they drop what they made). Without it, an
 * interrupted `npm run bench` left its schemas behind. Undos run together, bounded by
 * `timeoutMs`; then the process exits as the signal would have ended it (128 + its number).
 * Forked children need nothing here: they clean up when their IPC channel closes.
 */

type Undo = () => unknown;

const pending = new Set<Undo>();
let installed = false;

/** Registers `undo` until the returned function is called (from the benchmark's `finally`). */
export function onInterrupt(undo: Undo, timeoutMs = 10_000): () => void {
  if (!installed) {
    installed = true;
    for (const [signal, code] of [
      ["SIGINT", 130],
      ["SIGTERM", 143],
    ] as const) {
      process.once(signal, () => {
        process.stderr.write(`benchmark interrupted (${signal}): undoing what it made\n`);
        const undone = Promise.allSettled([...pending].map(async (u) => u()));
        const timeout = new Promise((resolve) => setTimeout(resolve, timeoutMs).unref());
        void Promise.race([undone, timeout]).then(() => process.exit(code));
      });
    }
  }
  pending.add(undo);
  return () => {
    pending.delete(undo);
  };
}
