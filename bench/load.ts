/**
 * A small closed-loop load generator: `concurrency` workers each call `fn`
 * back to back for `seconds`, after a warm-up. Reports throughput and latency
 * percentiles. Bounded in time; targets only the loopback server it is given.
 */
export interface LoadResult {
  name: string;
  concurrency: number;
  requests: number;
  errors: number;
  rps: number;
  p50: number;
  p99: number;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length));
  return sorted[i] ?? Number.NaN;
}

export async function runLoad(
  name: string,
  fn: () => Promise<unknown>,
  options: { concurrency: number; seconds: number; warmupSeconds?: number },
): Promise<LoadResult> {
  const warmupEnd = performance.now() + (options.warmupSeconds ?? 1) * 1000;
  const end = warmupEnd + options.seconds * 1000;
  const latencies: number[] = [];
  let errors = 0;
  const worker = async () => {
    for (;;) {
      const started = performance.now();
      if (started >= end) return;
      try {
        await fn();
      } catch {
        errors++;
      }
      const done = performance.now();
      if (started >= warmupEnd) latencies.push(done - started);
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  const sorted = Float64Array.from(latencies).sort();
  return {
    name,
    concurrency: options.concurrency,
    requests: latencies.length,
    errors,
    rps: latencies.length / options.seconds,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
  };
}

export function formatResults(results: readonly LoadResult[]): string {
  const header =
    "| scenario | in flight | req/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|";
  const rows = results.map(
    (r) =>
      `| ${r.name} | ${r.concurrency} | ${Math.round(r.rps)} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${r.errors} |`,
  );
  return [header, ...rows].join("\n");
}
