import { Client, type ClientConfig, escapeIdentifier, type QueryConfig } from "pg";
import type { Logger } from "../log.js";

/**
 * PostgreSQL LISTEN/NOTIFY for the database handle. Notifications are sent with
 * `SELECT pg_notify(channel, payload)` inside the writer's transaction, so they are
 * delivered at commit, to every process listening on the database (and, on PGlite, to
 * the process itself). Delivery is best effort: a listener whose connection dropped
 * misses what was sent meanwhile, and is told (`onReconnect`) so it can re-read.
 */

export interface ListenHandlers {
  onNotification(payload: string): void;
  /** The listening connection was lost and is back: notifications may have been missed. */
  onReconnect?(): void;
}

export interface NotificationSubscription {
  /** Stops listening. Idempotent. */
  close(): Promise<void>;
}

const channelName = /^[a-z_][a-z0-9_]{0,62}$/;

export function checkChannel(channel: string): void {
  if (!channelName.test(channel)) {
    throw new Error(`invalid notification channel "${channel}": use [a-z_][a-z0-9_]*`);
  }
}

/** Reconnection delays: from 100 ms, doubling, at most 2 s. */
const firstDelayMs = 100;
const maxDelayMs = 2_000;

/**
 * Listens on its own connection (not one of the pool's: a pooled connection is reset and
 * shared). A lost connection is re-opened with backoff until `close`. Connecting is bounded
 * by the config's connectionTimeoutMillis, the LISTEN statement by statementTimeoutMs, so a
 * server that accepts and does not answer is retried like one that refuses.
 */
export async function listenPostgres(
  config: ClientConfig,
  channel: string,
  handlers: ListenHandlers,
  log: Logger,
  options: { statementTimeoutMs: number },
): Promise<NotificationSubscription> {
  checkChannel(channel);
  let client: Client | undefined;
  let closed = false;
  let delay = firstDelayMs;
  let timer: NodeJS.Timeout | undefined;

  const lost = (c: Client) => {
    if (closed || client !== c) return;
    client = undefined;
    c.end().catch(() => {});
    retry();
  };

  const retry = () => {
    if (closed || timer !== undefined) return;
    timer = setTimeout(() => {
      timer = undefined;
      connect().then(
        () => {
          delay = firstDelayMs;
          log.info({ channel }, "listening for database notifications again");
          handlers.onReconnect?.();
        },
        () => {
          delay = Math.min(delay * 2, maxDelayMs);
          retry();
        },
      );
    }, delay);
    timer.unref();
  };

  async function connect(): Promise<void> {
    const c = new Client({ ...config, application_name: "traitgate-listen" });
    c.on("error", (err) => {
      log.warn({ channel, error: err.message }, "database notification connection failed");
      lost(c);
    });
    c.on("end", () => lost(c));
    c.on("notification", (message) => {
      if (message.channel === channel) handlers.onNotification(message.payload ?? "");
    });
    try {
      await c.connect();
      const listen: QueryConfig & { query_timeout: number } = {
        text: `LISTEN ${escapeIdentifier(channel)}`,
        query_timeout: options.statementTimeoutMs,
      };
      await c.query(listen);
    } catch (err) {
      await c.end().catch(() => {});
      throw err;
    }
    if (closed) {
      await c.end().catch(() => {});
      return;
    }
    client = c;
  }

  try {
    await connect();
  } catch (err) {
    // Not fatal: the subscriber also polls. Keep trying in the background.
    log.warn(
      { channel, error: err instanceof Error ? err.message : String(err) },
      "cannot listen for database notifications yet; retrying",
    );
    retry();
  }

  return {
    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      const c = client;
      client = undefined;
      await c?.end().catch(() => {});
    },
  };
}
