import type { Logger } from "../log.js";
import type { NotificationSubscription } from "./notify.js";
import type { Database } from "./types.js";

/**
 * Keeps something read from the database current on every process: a notification on
 * `channel` (sent by the writer at commit) triggers `reload` at once; a poll every
 * `pollIntervalMs` is the safety net for notifications lost while a listening connection
 * was down. Reloads never overlap: a request made during one runs once more after it.
 * Background failures are logged once until a reload works again.
 */
export interface Follower {
  /** Reloads now (one at a time); resolves once applied. */
  refresh(): Promise<void>;
  close(): Promise<void>;
}

export async function followChanges(options: {
  db: Pick<Database, "listen">;
  channel: string;
  /** What is followed, for log lines: "settings", "policy". */
  what: string;
  reload: () => Promise<void>;
  pollIntervalMs: number;
  log: Logger;
  /** Logged on the first failing background reload, at this level. */
  failureMessage: string;
  failureLevel: "warn" | "error";
}): Promise<Follower> {
  const { log, what } = options;
  let running: Promise<void> | undefined;
  let again = false;
  let failing = false;
  let closed = false;

  function refresh(): Promise<void> {
    if (running !== undefined) {
      again = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
          await options.reload();
        } while (again && !closed);
        if (failing) log.info(`${what} reload works again`);
        failing = false;
      } finally {
        running = undefined;
      }
    })();
    return running;
  }

  const background = () => {
    if (closed) return;
    refresh().catch((err: unknown) => {
      if (!failing) {
        log[options.failureLevel](
          { error: (err as Error).message, reason: (err as { reason?: string }).reason },
          options.failureMessage,
        );
      }
      failing = true;
    });
  };

  let subscription: NotificationSubscription | undefined;
  try {
    subscription = await options.db.listen(options.channel, {
      onNotification: background,
      onReconnect: background,
    });
  } catch (err) {
    log.warn({ error: (err as Error).message }, `${what} notifications unavailable; polling only`);
  }
  const timer = setInterval(background, options.pollIntervalMs);
  timer.unref();

  return {
    refresh,
    async close() {
      closed = true;
      clearInterval(timer);
      await subscription?.close();
      await running?.catch(() => {});
    },
  };
}
