import cluster, { type Worker } from "node:cluster";
import { randomUUID } from "node:crypto";
import { AggregatorRegistry, Gauge, Registry } from "prom-client";
import type { Logger } from "../log.js";

/**
 * `/metrics` under `serve --workers N` (src/serve-workers.ts): a scrape reaches whichever
 * worker the cluster handed the connection to, and that worker answers with every worker's
 * metrics, summed by prom-client's cluster aggregation (counters and histograms added; each
 * default process metric by its own rule). The worker asks the primary over the cluster's
 * channel; the primary asks every live worker for its registry and waits for each at most
 * `workerAnswerWithinMs`, then sends back the aggregate of the registries that came. So a
 * scrape of any worker describes the whole command, and a stuck or dead worker leaves only
 * itself out of it: `traitgate_metrics_workers{state="missing"}` counts those left out, and
 * the primary logs a warning naming each.
 */

/** What the metrics handler reads: one registry, or the aggregate of the workers'. */
export type MetricsSource = Pick<Registry, "metrics" | "contentType">;

/**
 * How long the primary waits for each worker's registry. Well below a scrape's usual timeout
 * (Prometheus: 10 s), so that a scrape with a stuck worker still answers, without it.
 */
export const workerAnswerWithinMs = 2_000;

/**
 * How long a worker waits for the aggregate: longer than the primary waits for the workers,
 * so that a stuck worker gives a scrape without it rather than a failed one.
 */
const aggregateAnswerWithinMs = workerAnswerWithinMs + 3_000;

/** One registry as `Registry.getMetricsAsJSON()` gives it (what the workers send). */
export type RegistryJson = Awaited<ReturnType<Registry["getMetricsAsJSON"]>>;

/** A worker as the primary asks it for its registry. */
export interface RegistryPeer {
  /** Its number, 1..N (src/serve-workers.ts), when known. */
  slot: number | undefined;
  pid: number | undefined;
  /** Its registry; `signal` aborts once the primary stops waiting. */
  registry(signal: AbortSignal): Promise<RegistryJson>;
}

/** The name of the gauge that says how many workers a scrape holds. */
export const workersGaugeName = "traitgate_metrics_workers";

const aggregateRequest = "traitgate:metrics-request";
const aggregateAnswer = "traitgate:metrics-answer";
const registryRequest = "traitgate:metrics-registry-request";
const registryAnswer = "traitgate:metrics-registry-answer";
const registryReady = "traitgate:metrics-registry-ready";

interface AggregateRequest {
  type: typeof aggregateRequest;
  id: string;
}
interface AggregateAnswer {
  type: typeof aggregateAnswer;
  id: string;
  text?: string;
  error?: string;
}
interface RegistryRequest {
  type: typeof registryRequest;
  id: string;
}
interface RegistryReady {
  type: typeof registryReady;
}
interface RegistryAnswer {
  type: typeof registryAnswer;
  id: string;
  metrics?: RegistryJson;
  error?: string;
}

const isMessage = <T extends { type: string }>(message: unknown, type: string): message is T =>
  typeof message === "object" && message !== null && (message as { type?: unknown }).type === type;

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * The aggregate of the registries of those of `peers` that answer within `withinMs`, with
 * `traitgate_metrics_workers` saying how many did and how many are missing: those that did not
 * answer in time (or failed to), each logged, plus `expected` less the peers asked (workers
 * dead and waiting to be started again, or still starting). Rejects when none answered.
 */
export async function aggregatePeerMetrics(
  peers: readonly RegistryPeer[],
  options: { expected: number; withinMs: number; log: Logger },
): Promise<string> {
  const { withinMs, log } = options;
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), withinMs);
  const outcomes = await Promise.all(
    peers.map(
      (peer) =>
        new Promise<{ peer: RegistryPeer; metrics?: RegistryJson; missing?: string }>((resolve) => {
          const late = () => resolve({ peer, missing: `no answer within ${withinMs} ms` });
          stop.signal.addEventListener("abort", late, { once: true });
          peer.registry(stop.signal).then(
            (metrics) => resolve({ peer, metrics }),
            (err: unknown) => resolve({ peer, missing: messageOf(err) }),
          );
        }),
    ),
  ).finally(() => {
    clearTimeout(timer);
    stop.abort();
  });

  const answered: RegistryJson[] = [];
  let missing = Math.max(0, options.expected - peers.length);
  for (const outcome of outcomes) {
    if (outcome.metrics !== undefined) {
      answered.push(outcome.metrics);
      continue;
    }
    missing++;
    // Which worker and why; nothing of any request.
    log.warn(
      { worker: outcome.peer.slot, worker_pid: outcome.peer.pid, reason: outcome.missing },
      "a worker did not answer for the metrics: this scrape leaves it out",
    );
  }
  if (answered.length === 0) {
    throw new Error(`no worker answered within ${withinMs} ms (${peers.length} asked)`);
  }
  const own = new Registry();
  const workers = new Gauge({
    name: workersGaugeName,
    help: 'Workers of serve --workers whose metrics this scrape holds (state="answered") or lacks (state="missing": no answer in time, dead or starting).',
    labelNames: ["state"] as const,
    registers: [own],
  });
  workers.set({ state: "answered" }, answered.length);
  workers.set({ state: "missing" }, missing);
  return AggregatorRegistry.aggregate([...answered, await own.getMetricsAsJSON()]).metrics();
}

/**
 * In the primary: answers the workers' requests for the aggregate. `expected` is the number of
 * workers the command runs; `slotOf` gives a worker's number for the log.
 */
export function aggregateWorkerMetrics(options: {
  log: Logger;
  expected: number;
  slotOf?: (worker: Worker) => number | undefined;
  withinMs?: number;
}): void {
  const withinMs = options.withinMs ?? workerAnswerWithinMs;
  const pending = new Map<string, (answer: RegistryAnswer) => void>();
  // Workers that answer for their registry: a worker still starting does not yet, and is not
  // waited for (it counts as missing).
  const ready = new WeakSet<Worker>();

  const peerOf = (worker: Worker): RegistryPeer => ({
    slot: options.slotOf?.(worker),
    pid: worker.process.pid,
    registry: (signal) =>
      new Promise<RegistryJson>((resolve, reject) => {
        const id = randomUUID();
        const settle = () => {
          pending.delete(id);
          worker.off("exit", onExit);
          signal.removeEventListener("abort", onAbort);
        };
        const onExit = () => {
          settle();
          reject(new Error("the worker exited"));
        };
        const onAbort = () => {
          settle();
          reject(new Error("no longer waited for"));
        };
        pending.set(id, (answer) => {
          settle();
          if (answer.metrics !== undefined) resolve(answer.metrics);
          else reject(new Error(answer.error ?? "no registry"));
        });
        worker.once("exit", onExit);
        signal.addEventListener("abort", onAbort, { once: true });
        worker.send({ type: registryRequest, id } satisfies RegistryRequest, (err) => {
          if (err) {
            settle();
            reject(err);
          }
        });
      }),
  });

  cluster.on("message", (worker, message: unknown) => {
    if (isMessage<RegistryReady>(message, registryReady)) {
      ready.add(worker);
      return;
    }
    if (isMessage<RegistryAnswer>(message, registryAnswer)) {
      // An answer that came too late finds nothing waiting for it.
      pending.get(message.id)?.(message);
      return;
    }
    if (!isMessage<AggregateRequest>(message, aggregateRequest)) return;
    const reply = (fields: Omit<AggregateAnswer, "type" | "id">) => {
      if (worker.isConnected()) worker.send({ type: aggregateAnswer, id: message.id, ...fields });
    };
    // A worker still starting, or that has lost its channel, cannot answer: it counts as
    // missing, unasked.
    const peers = Object.values(cluster.workers ?? {})
      .filter((w): w is Worker => w !== undefined && ready.has(w) && w.isConnected())
      .map(peerOf);
    aggregatePeerMetrics(peers, { expected: options.expected, withinMs, log: options.log }).then(
      (text) => reply({ text }),
      (err: unknown) => reply({ error: messageOf(err) }),
    );
  });
}

/** In a worker: answers the primary's requests for `own`, and reads the aggregate for a scrape. */
export function workerMetricsSource(own: Registry): MetricsSource {
  process.on("message", (message: unknown) => {
    if (!isMessage<RegistryRequest>(message, registryRequest)) return;
    const send = (fields: Omit<RegistryAnswer, "type" | "id">) =>
      process.send?.({ type: registryAnswer, id: message.id, ...fields } satisfies RegistryAnswer);
    own.getMetricsAsJSON().then(
      (metrics) => send({ metrics }),
      (err: unknown) => send({ error: messageOf(err) }),
    );
  });
  process.send?.({ type: registryReady } satisfies RegistryReady);
  return {
    contentType: own.contentType,
    metrics: () =>
      new Promise<string>((resolve, reject) => {
        const id = randomUUID();
        const onMessage = (message: unknown) => {
          if (!isMessage<AggregateAnswer>(message, aggregateAnswer) || message.id !== id) return;
          settle();
          if (message.text !== undefined) resolve(message.text);
          else reject(new Error(`the workers' metrics: ${message.error ?? "no answer"}`));
        };
        const timer = setTimeout(() => {
          settle();
          reject(new Error(`the workers' metrics: no answer within ${aggregateAnswerWithinMs} ms`));
        }, aggregateAnswerWithinMs);
        const settle = () => {
          clearTimeout(timer);
          process.off("message", onMessage);
        };
        process.on("message", onMessage);
        process.send?.({ type: aggregateRequest, id } satisfies AggregateRequest);
      }),
  };
}
