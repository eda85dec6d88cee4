import { pathToFileURL } from "node:url";
import { compilePolicy, loadTraitRegistry } from "../src/policy/index.js";
import { loadPeers } from "./peers.js";
import {
  type Engine,
  makeWorkload,
  oracleAnswers,
  requestCount,
  traitgateRequest,
  type Workload,
} from "./policy-workload.js";

/**
 * The policy engine in process against Cedar (`@cedar-policy/cedar-wasm`, the
 * stateful API with the policy set preparsed once) and Casbin (`casbin`,
 * RBAC with role inheritance and deny-override), on equivalent policies, in
 * one run, on one core.
 *
 * Workload (deterministic): 50 roles in an inheritance tree (role i implies
 * roles 2i+1 and 2i+2, so role 0 holds all), 200 users with one or two roles,
 * 5 capabilities, max(10, rules/25) data classes; each rule is a distinct
 * (role, capability, data class) triple that allows (80 %) or denies (20 %);
 * 10,000 requests (user, capability, data class), biased towards triples
 * some rule names. Before timing, every engine's answers are checked against
 * the reference evaluator (src/policy/reference.ts) on the same requests.
 */

export const ruleCounts = [10, 100, 200, 1_000, 10_000];

function traitgateEngine(w: Workload): Engine {
  const engine = compilePolicy(w.doc, loadTraitRegistry(w.definitions));
  const requests = w.requests.map((_, i) => traitgateRequest(w, i));
  return { name: "traitgate", decide: (i) => engine.evaluate(requests[i]!).decision === "allow" };
}

interface Measured {
  engine: string;
  rules: number;
  checked: number;
  rps: number;
  p50us: number;
  p99us: number;
}

function measure(engine: Engine, rules: number, checked: number, seconds: number): Measured {
  const n = requestCount;
  // Throughput: back to back over the request list, the clock read every 256 decisions.
  let warm = 0;
  for (const stop = performance.now() + Math.min(500, seconds * 200); performance.now() < stop; ) {
    for (let k = 0; k < 256; k++) engine.decide(warm++ % n);
  }
  let done = 0;
  const started = performance.now();
  const stop = started + seconds * 1000;
  let now = started;
  while (now < stop) {
    for (let k = 0; k < 256; k++) engine.decide((done + k) % n);
    done += 256;
    now = performance.now();
  }
  const rps = done / ((now - started) / 1000);
  // Latency: each decision timed alone, for half the time again.
  const samples: number[] = [];
  const latencyStop = performance.now() + (seconds * 1000) / 2;
  for (let i = 0; samples.length < 2_000_000; i++) {
    const t0 = performance.now();
    engine.decide(i % n);
    const t1 = performance.now();
    samples.push(t1 - t0);
    if (t1 >= latencyStop) break;
  }
  const sorted = Float64Array.from(samples).sort();
  const at = (p: number) =>
    (sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0) * 1000;
  return { engine: engine.name, rules, checked, rps, p50us: at(0.5), p99us: at(0.99) };
}

/** Checks `engine` against the reference on the first `count` requests; throws on a difference. */
function checkAgainstOracle(engine: Engine, w: Workload, oracle: boolean[], count: number): void {
  for (let i = 0; i < count; i++) {
    if (engine.decide(i) !== oracle[i]) {
      throw new Error(
        `${engine.name} differs from the reference on request ${i} (${w.requests[i]})`,
      );
    }
  }
}

export async function benchPolicy(seconds: number): Promise<string> {
  const results: Measured[] = [];
  const notes: string[] = [];
  const peers = await loadPeers();
  if ("missing" in peers) notes.push(`- ${peers.missing}`);
  for (const rules of ruleCounts) {
    const w = makeWorkload(rules);
    // The naive reference scans every rule: check fewer requests for large policies.
    const count = Math.max(200, Math.min(requestCount, Math.floor(2_000_000 / rules)));
    const oracle = oracleAnswers(w, count);
    const allowed = oracle.filter(Boolean).length;
    notes.push(
      `- ${rules} rules: ${w.classCount} data classes; reference check on ${count} requests (${allowed} allow, ${count - allowed} deny)`,
    );
    const makers: ((w: Workload) => Engine | Promise<Engine>)[] = [traitgateEngine];
    if (!("missing" in peers)) makers.push(peers.cedarEngine, peers.casbinEngine);
    for (const make of makers) {
      const engine = await make(w);
      checkAgainstOracle(engine, w, oracle, count);
      results.push(measure(engine, rules, count, seconds));
    }
  }
  const ours = (rules: number) =>
    results.find((r) => r.rules === rules && r.engine === "traitgate")!;
  const rows = results.map((r) => {
    const ratio = r.engine === "traitgate" ? "1" : `${(ours(r.rules).rps / r.rps).toFixed(0)}×`;
    return `| ${r.rules} | ${r.engine} | ${Math.round(r.rps).toLocaleString("en-US")} | ${r.p50us.toFixed(2)} | ${r.p99us.toFixed(2)} | ${ratio} |`;
  });
  return [
    "## Policy engine in process (one core): Traitgate vs cedar-wasm and casbin",
    "",
    "| rules | engine | decisions/s | p50 µs | p99 µs | Traitgate is faster by |",
    "|---:|---|---:|---:|---:|---:|",
    ...rows,
    "",
    ...notes,
    "- every engine agreed with the reference evaluator on the checked requests before it was timed",
    "- p50/p99: each decision timed alone with performance.now() (the timer's own cost included); decisions/s: untimed loop",
  ].join("\n");
}

// `node dist/bench/policy.js`: this benchmark alone (BENCH_SECONDS per scenario, default 3).
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await benchPolicy(Number(process.env.BENCH_SECONDS ?? "3")));
}
