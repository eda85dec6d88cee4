import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import {
  Health,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.js";

export type ServingStatus = "SERVING" | "NOT_SERVING";

export interface HealthChecker {
  /** Overall status ("" service) and per-service status; the server computes it from e.g. a database ping. */
  check(): Promise<ServingStatus>;
}

export interface HealthOptions {
  /** How often `check()` is polled while at least one Watch stream is open. Default 1000 ms. */
  watchIntervalMs?: number;
}

/**
 * Registers grpc.health.v1.Health (Check, Watch, List).
 *
 * Known names are "" (the whole server) and `services`; every known name has the checker's
 * status, and a checker that throws means NOT_SERVING (fail closed). Check of an unknown name
 * is NOT_FOUND. Watch of an unknown name sends SERVICE_UNKNOWN and stays open, as the protocol
 * says; of a known name it sends the current status, then each change. The checker is polled
 * every `watchIntervalMs` by one shared loop, and only while some Watch stream is open.
 */
export function registerHealth(
  router: ConnectRouter,
  services: readonly string[],
  checker: HealthChecker,
  options: HealthOptions = {},
): void {
  const known = new Set(["", ...services]);
  const monitor = createStatusMonitor(checker, options.watchIntervalMs ?? 1000);

  router.service(Health, {
    async check(req) {
      if (!known.has(req.service))
        throw new ConnectError(`unknown service: ${req.service}`, Code.NotFound);
      return { status: toProto(await safeCheck(checker)) };
    },
    async list() {
      const status = toProto(await safeCheck(checker));
      return { statuses: Object.fromEntries([...known].map((name) => [name, { status }])) };
    },
    async *watch(req, ctx) {
      if (!known.has(req.service)) {
        yield { status: Status.SERVICE_UNKNOWN };
        await new Promise<void>((resolve) => onAbort(ctx.signal, resolve));
        return;
      }
      const updates = monitor.subscribe();
      try {
        let sent = await safeCheck(checker);
        yield { status: toProto(sent) };
        for (;;) {
          const next = await updates.next(ctx.signal);
          if (next === undefined) return;
          if (next !== sent) {
            sent = next;
            yield { status: toProto(next) };
          }
        }
      } finally {
        updates.close();
      }
    },
  });
}

function toProto(status: ServingStatus): Status {
  return status === "SERVING" ? Status.SERVING : Status.NOT_SERVING;
}

async function safeCheck(checker: HealthChecker): Promise<ServingStatus> {
  try {
    return (await checker.check()) === "SERVING" ? "SERVING" : "NOT_SERVING";
  } catch {
    return "NOT_SERVING";
  }
}

function onAbort(signal: AbortSignal, listener: () => void): () => void {
  if (signal.aborted) {
    listener();
    return () => {};
  }
  signal.addEventListener("abort", listener, { once: true });
  return () => signal.removeEventListener("abort", listener);
}

interface Subscription {
  /** The next polled status, or undefined once `signal` aborts. */
  next(signal: AbortSignal): Promise<ServingStatus | undefined>;
  close(): void;
}

/** One polling loop shared by all watchers, running only while there are watchers. */
function createStatusMonitor(
  checker: HealthChecker,
  intervalMs: number,
): { subscribe(): Subscription } {
  const watchers = new Set<(status: ServingStatus) => void>();
  let timer: NodeJS.Timeout | undefined;
  let polling = false;

  const schedule = (): void => {
    if (timer !== undefined || polling || watchers.size === 0) return;
    timer = setTimeout(poll, intervalMs);
    timer.unref();
  };
  const poll = async (): Promise<void> => {
    timer = undefined;
    polling = true;
    const status = await safeCheck(checker);
    polling = false;
    for (const w of watchers) w(status);
    schedule();
  };

  return {
    subscribe() {
      let latest: ServingStatus | undefined;
      let wake: (() => void) | undefined;
      const watcher = (status: ServingStatus): void => {
        latest = status;
        wake?.();
      };
      watchers.add(watcher);
      schedule();
      return {
        next(signal) {
          if (signal.aborted) return Promise.resolve(undefined);
          return new Promise((resolve) => {
            let removeAbort = (): void => {};
            const take = (): void => {
              wake = undefined;
              removeAbort();
              const status = signal.aborted ? undefined : latest;
              latest = undefined;
              resolve(status);
            };
            if (latest !== undefined) return take();
            wake = take;
            removeAbort = onAbort(signal, take);
          });
        },
        close() {
          watchers.delete(watcher);
          if (watchers.size === 0 && timer !== undefined) {
            clearTimeout(timer);
            timer = undefined;
          }
        },
      };
    },
  };
}
