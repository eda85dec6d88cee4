import cluster from "node:cluster";
import { randomUUID } from "node:crypto";
import { AggregatorRegistry, type Registry } from "prom-client";

/**
 * `/metrics` under `serve --workers N` (src/serve-workers.ts): a scrape reaches whichever
 * worker the cluster handed the connection to, and that worker answers with every worker's
 * metrics, summed by prom-client's cluster aggregation (counters and histograms added; each
 * default process metric by its own rule). The worker asks the primary over the cluster's
 * channel; the primary asks every worker for its registry (prom-client's own messages) and
 * sends back the aggregate. So a scrape of any worker describes the whole command.
 */

/** What the metrics handler reads: one registry, or the aggregate of the workers'. */
export type MetricsSource = Pick<Registry, "metrics" | "contentType">;

const request = "traitgate:metrics-request";
const answer = "traitgate:metrics-answer";

interface MetricsRequest {
  type: typeof request;
  id: string;
}
interface MetricsAnswer {
  type: typeof answer;
  id: string;
  text?: string;
  error?: string;
}

const isMessage = <T extends { type: string }>(message: unknown, type: string): message is T =>
  typeof message === "object" && message !== null && (message as { type?: unknown }).type === type;

/** In the primary: answers the workers' requests for the aggregate. */
export function aggregateWorkerMetrics(): void {
  const aggregator = new AggregatorRegistry();
  cluster.on("message", (worker, message: unknown) => {
    if (!isMessage<MetricsRequest>(message, request)) return;
    const reply = (fields: Omit<MetricsAnswer, "type" | "id">) => {
      if (worker.isConnected()) worker.send({ type: answer, id: message.id, ...fields });
    };
    aggregator.clusterMetrics().then(
      (text) => reply({ text }),
      (err: unknown) => reply({ error: err instanceof Error ? err.message : String(err) }),
    );
  });
}

/** How long a worker waits for the aggregate (prom-client gives up on a worker after 5 s). */
const answerTimeoutMs = 7_000;

/** In a worker: offers `own` to the aggregation, and reads the aggregate for a scrape. */
export function workerMetricsSource(own: Registry): MetricsSource {
  // Constructing it makes this worker answer the primary's requests for its registry.
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([own]);
  return {
    contentType: own.contentType,
    metrics: () =>
      new Promise<string>((resolve, reject) => {
        const id = randomUUID();
        const onMessage = (message: unknown) => {
          if (!isMessage<MetricsAnswer>(message, answer) || message.id !== id) return;
          settle();
          if (message.text !== undefined) resolve(message.text);
          else reject(new Error(`the workers' metrics: ${message.error ?? "no answer"}`));
        };
        const timer = setTimeout(() => {
          settle();
          reject(new Error(`the workers' metrics: no answer within ${answerTimeoutMs} ms`));
        }, answerTimeoutMs);
        const settle = () => {
          clearTimeout(timer);
          process.off("message", onMessage);
        };
        process.on("message", onMessage);
        process.send?.({ type: request, id } satisfies MetricsRequest);
      }),
  };
}
