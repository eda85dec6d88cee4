import { readdirSync, readFileSync } from "node:fs";

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
  /**
   * CPU time per request (µs) of the processes given in `cpu`, over the measured window:
   * what a request costs each party whatever the machine's load does to latency.
   */
  cpuUsPerRequest?: Record<string, number>;
}

/**
 * CPU time (ms) a process has used so far, from /proc (Linux); NaN when it cannot be read.
 * With `reaped`, plus that of its children that have exited and been waited for (cutime,
 * cstime): summed over a set of processes that includes the parent, a child that exits
 * between two samples then still counts, instead of taking its CPU time out of the sum.
 */
export function processCpuMs(pid: number, options: { reaped?: boolean } = {}): number {
  try {
    // The fields after the command name (which may hold spaces) start at state, field 3.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    let ticks = Number(fields[11]) + Number(fields[12]); // utime + stime (fields 14, 15)
    if (options.reaped) ticks += Number(fields[13]) + Number(fields[14]); // cutime + cstime
    return (ticks * 1000) / clockTicksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** USER_HZ: 100 on every Linux this runs on (the kernel ABI fixes it for /proc). */
const clockTicksPerSecond = 100;

/** The process `root` and every process descended from it (Linux, from /proc). */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // Exited while listed.
    }
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i++) tree.push(...(children.get(tree[i] as number) ?? []));
  return tree;
}

/**
 * CPU time (ms) of a process and all its descendants (e.g. `serve --workers`: the primary and
 * its workers), those that exited and were waited for included; NaN when the root cannot be
 * read.
 */
export function processTreeCpuMs(root: number): number {
  return processTree(root).reduce((sum, pid) => {
    const ms = processCpuMs(pid, { reaped: true });
    return Number.isNaN(ms) && pid !== root ? sum : sum + ms;
  }, 0);
}

/**
 * CPU time (ms) of every process whose command name is `comm` (e.g. all `postgres` backends),
 * with the children each has waited for: a backend that exits during a measurement moves its
 * CPU time into the postmaster's count instead of out of the sum (which could go negative).
 */
export function commandCpuMs(comm: string): number {
  let total = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() !== comm) continue;
    } catch {
      continue;
    }
    const ms = processCpuMs(Number(entry), { reaped: true });
    if (!Number.isNaN(ms)) total += ms;
  }
  return total;
}

/** Samples CPU time (ms) of named parties; `runLoad` reports the difference per request. */
export type CpuSampler = () => Record<string, number>;

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length));
  return sorted[i] ?? Number.NaN;
}

export async function runLoad(
  name: string,
  fn: () => Promise<unknown>,
  options: { concurrency: number; seconds: number; warmupSeconds?: number; cpu?: CpuSampler },
): Promise<LoadResult> {
  const warmupEnd = performance.now() + (options.warmupSeconds ?? 1) * 1000;
  const end = warmupEnd + options.seconds * 1000;
  let cpuAtStart: Record<string, number> | undefined;
  const cpuTimer = options.cpu
    ? setTimeout(() => {
        cpuAtStart = options.cpu?.();
      }, warmupEnd - performance.now())
    : undefined;
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
  clearTimeout(cpuTimer);
  const cpuAtEnd = options.cpu?.();
  const sorted = Float64Array.from(latencies).sort();
  return {
    name,
    concurrency: options.concurrency,
    requests: latencies.length,
    errors,
    rps: latencies.length / options.seconds,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    ...(cpuAtStart && cpuAtEnd && latencies.length > 0
      ? { cpuUsPerRequest: perRequest(cpuAtStart, cpuAtEnd, latencies.length) }
      : {}),
  };
}

function perRequest(
  start: Record<string, number>,
  end: Record<string, number>,
  requests: number,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [party, ms] of Object.entries(end)) {
    const before = start[party];
    if (before !== undefined && !Number.isNaN(ms - before)) {
      out[party] = ((ms - before) * 1000) / requests;
    }
  }
  return out;
}

export function formatResults(results: readonly LoadResult[]): string {
  // One CPU column per party any result measured (µs of CPU per request; 10 ms /proc ticks).
  const parties = [...new Set(results.flatMap((r) => Object.keys(r.cpuUsPerRequest ?? {})))];
  const header = [
    `| scenario | in flight | req/s | p50 ms | p99 ms | errors |${parties.map((p) => ` ${p} CPU µs/req |`).join("")}`,
    `|---|---:|---:|---:|---:|---:|${parties.map(() => "---:|").join("")}`,
  ].join("\n");
  const rows = results.map((r) => {
    const cpu = parties.map((p) => {
      const us = r.cpuUsPerRequest?.[p];
      return ` ${us === undefined ? "" : Math.round(us)} |`;
    });
    return `| ${r.name} | ${r.concurrency} | ${Math.round(r.rps)} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${r.errors} |${cpu.join("")}`;
  });
  return [header, ...rows].join("\n");
}
