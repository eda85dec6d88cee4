import type { Logger } from "../log.js";
import type { RequestListener } from "../server/app.js";
import type { MetricsSource } from "./cluster.js";
import type { MetricsConfig } from "./config.js";
import { createMetricsHandler, listenForMetrics, withMetricsPath } from "./endpoint.js";

export { aggregateWorkerMetrics, type MetricsSource, workerMetricsSource } from "./cluster.js";
export { type CoreSources, collectCoreMetrics } from "./collect.js";
export { type MetricsConfig, metricsConfig } from "./config.js";
export { createMetrics, type Metrics } from "./metrics.js";

export interface MetricsEndpoint {
  /** The app's listener, with `/metrics` when it is served on the main port. */
  listener: RequestListener;
  /** Where the metrics are, given the main port's URL. */
  url(mainUrl: string): string;
  /** Who may read them, in words (for the start-up line and the demo). */
  access: string;
  close(): Promise<void>;
}

/** Serves `/metrics` where the configuration says (docs/operations.md, "Metrics"). */
export async function exposeMetrics(
  app: RequestListener,
  options: { registry: MetricsSource; config: MetricsConfig; log: Logger },
): Promise<MetricsEndpoint> {
  const { config } = options;
  const handler = createMetricsHandler(options.registry, config, options.log);
  const access =
    config.token !== undefined
      ? "with Authorization: Bearer <METRICS_TOKEN>"
      : config.public
        ? "anyone (METRICS_PUBLIC)"
        : "loopback clients only";
  if (config.port === undefined) {
    return {
      listener: withMetricsPath(app, handler),
      url: (mainUrl) => `${mainUrl}/metrics`,
      access,
      close: async () => {},
    };
  }
  const own = await listenForMetrics(handler, { port: config.port, host: config.host });
  return { listener: app, url: () => own.url, access, close: () => own.close() };
}
