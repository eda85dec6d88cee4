import { unavailable } from "../errors.js";
import { databaseUnavailableReason } from "../storage/index.js";

/**
 * Runs work against the database, answering DATABASE_UNAVAILABLE when it takes longer
 * than timeoutMs. The work is told when it has expired, so that a transaction can roll
 * back instead of committing after its caller was told it failed.
 */
export function createBounded(timeoutMs: number) {
  return async function bounded<T>(work: (expired: () => boolean) => Promise<T>): Promise<T> {
    let expired = false;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        expired = true;
        reject(
          unavailable(
            databaseUnavailableReason,
            `the database did not answer within ${timeoutMs} ms; try again shortly`,
          ),
        );
      }, timeoutMs);
      timer.unref();
    });
    const running = work(() => expired);
    running.catch(() => {}); // a late failure after the timeout is not unhandled
    try {
      return await Promise.race([running, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
}
