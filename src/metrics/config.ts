/**
 * Where `/metrics` is served and who may read it (docs/operations.md, "Metrics"):
 *
 * - `METRICS_PORT` unset: on the main port, at `/metrics`; set: on a listener of its own
 *   (`METRICS_HOST`, default 127.0.0.1), and the main port does not serve it (`0`: any free
 *   port, for tests).
 * - Who: with `METRICS_TOKEN`, whoever sends `Authorization: Bearer <token>`; else with
 *   `METRICS_PUBLIC=true`, anyone; else loopback clients only (and never a request that came
 *   through a proxy: it carries a forwarding header).
 */
export interface MetricsConfig {
  /** A listener of its own; undefined: the main port. */
  port: number | undefined;
  /** That listener's address. */
  host: string;
  /** Every client may read the metrics (else loopback clients only). */
  public: boolean;
  /** A bearer token every scrape must carry (then from any address). */
  token: string | undefined;
}

/** The shortest METRICS_TOKEN accepted. */
export const minMetricsTokenLength = 16;

export function metricsConfig(env: NodeJS.ProcessEnv, problems: string[]): MetricsConfig {
  const rawPort = env.METRICS_PORT?.trim() ?? "";
  let port: number | undefined;
  if (rawPort !== "") {
    port = Number(rawPort);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      problems.push(`METRICS_PORT must be an integer from 0 to 65535 (got "${rawPort}")`);
      port = undefined;
    } else if (port !== 0 && port === Number(env.PORT?.trim() || 8080)) {
      problems.push("METRICS_PORT must differ from PORT (unset it to serve /metrics on PORT)");
    }
  }
  const rawPublic = env.METRICS_PUBLIC?.trim().toLowerCase() ?? "";
  let isPublic = false;
  if (["true", "1", "yes"].includes(rawPublic)) isPublic = true;
  else if (!["", "false", "0", "no"].includes(rawPublic)) {
    problems.push(`METRICS_PUBLIC must be true or false (got "${env.METRICS_PUBLIC}")`);
  }
  const token = env.METRICS_TOKEN?.trim() || undefined;
  if (token !== undefined && Buffer.byteLength(token) < minMetricsTokenLength) {
    // The value is not repeated: it is a secret.
    problems.push(`METRICS_TOKEN must be at least ${minMetricsTokenLength} bytes long`);
  }
  const host = env.METRICS_HOST?.trim() || "127.0.0.1";
  if (env.METRICS_HOST?.trim() && port === undefined) {
    problems.push("METRICS_HOST needs METRICS_PORT (without it, /metrics is on the main port)");
  }
  return { port, host, public: isPublic, token };
}
