import { pathToFileURL } from "node:url";
import * as cedar from "@cedar-policy/cedar-wasm/nodejs";
import { newEnforcer, newModelFromString, StringAdapter } from "casbin";
import {
  compilePolicy,
  type EvaluationRequest,
  loadTraitRegistry,
  type PolicyDocument,
  type PolicyRule,
  type TraitDefinition,
} from "../src/policy/index.js";
import { referenceEvaluate } from "../src/policy/reference.js";

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

const roleCount = 50;
const userCount = 200;
const capabilityCount = 5;
const requestCount = 10_000;
export const ruleCounts = [10, 100, 200, 1_000, 10_000];

interface Workload {
  definitions: TraitDefinition[];
  doc: PolicyDocument;
  users: number[][];
  /** [user, capability, data class] */
  requests: [number, number, number][];
  classCount: number;
}

function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const juniorRoles = (i: number) => [2 * i + 1, 2 * i + 2].filter((j) => j < roleCount);

export function makeWorkload(ruleCount: number, seed = 42): Workload {
  const rand = seeded(seed + ruleCount);
  const int = (n: number) => Math.floor(rand() * n);
  const classCount = Math.max(10, Math.ceil(ruleCount / 25));
  const definitions: TraitDefinition[] = [
    ...Array.from({ length: roleCount }, (_, i) => ({
      name: `role:r${i}`,
      implies: juniorRoles(i).map((j) => `role:r${j}`),
    })),
    ...Array.from({ length: capabilityCount }, (_, i) => ({ name: `capability:c${i}` })),
    ...Array.from({ length: classCount }, (_, i) => ({ name: `data_access:d${i}` })),
  ];
  const triples = new Set<string>();
  const rules: PolicyRule[] = [];
  while (rules.length < ruleCount) {
    const [role, cap, cls] = [int(roleCount), int(capabilityCount), int(classCount)];
    const key = `${role}/${cap}/${cls}`;
    if (triples.has(key)) continue;
    triples.add(key);
    rules.push({
      id: `p${rules.length}`,
      description: `rule ${rules.length}`,
      contexts: ["BENCH"],
      when: { all: [`role:r${role}`, `capability:c${cap}`, `data_access:d${cls}`] },
      decision: rand() < 0.2 ? "deny" : "allow",
    });
  }
  const users = Array.from({ length: userCount }, () =>
    rand() < 0.5 ? [int(roleCount)] : [int(roleCount), int(roleCount)],
  );
  const requests = Array.from({ length: requestCount }, (): [number, number, number] => {
    const user = int(userCount);
    if (rand() < 0.7) {
      const [, cap, cls] = rules[int(ruleCount)]!.when.all!.map((t) =>
        Number(t.slice(t.lastIndexOf(":") + 2)),
      );
      return [user, cap!, cls!];
    }
    return [user, int(capabilityCount), int(classCount)];
  });
  return { definitions, doc: { rules }, users, requests, classCount };
}

/** One engine, prepared: `decide(i)` answers request i as true (allow) or false (deny). */
interface Engine {
  name: string;
  decide: (i: number) => boolean;
}

function traitgateEngine(w: Workload): Engine {
  const engine = compilePolicy(w.doc, loadTraitRegistry(w.definitions));
  const requests: EvaluationRequest[] = w.requests.map(([u, cap, cls]) => ({
    traits: [...w.users[u]!.map((r) => `role:r${r}`), `capability:c${cap}`, `data_access:d${cls}`],
    context: "BENCH",
  }));
  return { name: "traitgate", decide: (i) => engine.evaluate(requests[i]!).decision === "allow" };
}

function cedarEngine(w: Workload): Engine {
  const text = w.doc.rules
    .map((rule) => {
      const [role, cap, cls] = rule.when.all!.map((t) => t.slice(t.indexOf(":") + 1));
      const effect = rule.decision === "deny" ? "forbid" : "permit";
      return `${effect}(principal in Role::"${role}", action == Action::"${cap}", resource == Data::"${cls}");`;
    })
    .join("\n");
  const setId = `bench-${w.doc.rules.length}`;
  const parsed = cedar.preparsePolicySet(setId, { staticPolicies: text });
  if (parsed.type !== "success") throw new Error(`cedar: ${JSON.stringify(parsed.errors[0])}`);
  const roleEntity = (i: number): cedar.EntityJson => ({
    uid: { type: "Role", id: `r${i}` },
    attrs: {},
    parents: juniorRoles(i).map((j) => ({ type: "Role", id: `r${j}` })),
  });
  // Each request carries its own entity slice: the user and the roles it reaches.
  const slices = w.users.map((roles, u): cedar.EntityJson[] => {
    const reach = new Set<number>();
    const visit = (r: number) => {
      if (reach.has(r)) return;
      reach.add(r);
      for (const j of juniorRoles(r)) visit(j);
    };
    for (const r of roles) visit(r);
    return [
      {
        uid: { type: "User", id: `u${u}` },
        attrs: {},
        parents: roles.map((r) => ({ type: "Role", id: `r${r}` })),
      },
      ...[...reach].map(roleEntity),
    ];
  });
  const calls: cedar.StatefulAuthorizationCall[] = w.requests.map(([u, cap, cls]) => ({
    principal: { type: "User", id: `u${u}` },
    action: { type: "Action", id: `c${cap}` },
    resource: { type: "Data", id: `d${cls}` },
    context: {},
    preparsedPolicySetId: setId,
    entities: slices[u]!,
  }));
  return {
    name: "cedar-wasm",
    decide: (i) => {
      const answer = cedar.statefulIsAuthorized(calls[i]!);
      if (answer.type !== "success") throw new Error(`cedar: ${JSON.stringify(answer.errors[0])}`);
      return answer.response.decision === "allow";
    },
  };
}

const casbinModel = `
[request_definition]
r = sub, obj, act
[policy_definition]
p = sub, obj, act, eft
[role_definition]
g = _, _
[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))
[matchers]
m = g(r.sub, p.sub) && r.obj == p.obj && r.act == p.act
`;

async function casbinEngine(w: Workload): Promise<Engine> {
  const lines = [
    ...w.doc.rules.map((rule) => {
      const [role, cap, cls] = rule.when.all!.map((t) => t.slice(t.indexOf(":") + 1));
      return `p, ${role}, ${cls}, ${cap}, ${rule.decision}`;
    }),
    ...Array.from({ length: roleCount }, (_, i) =>
      juniorRoles(i).map((j) => `g, r${i}, r${j}`),
    ).flat(),
    ...w.users.flatMap((roles, u) => roles.map((r) => `g, u${u}, r${r}`)),
  ];
  const enforcer = await newEnforcer(
    newModelFromString(casbinModel),
    new StringAdapter(lines.join("\n")),
  );
  const args = w.requests.map(([u, cap, cls]) => [`u${u}`, `d${cls}`, `c${cap}`]);
  return { name: "casbin", decide: (i) => enforcer.enforceSync(...args[i]!) };
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
  for (const rules of ruleCounts) {
    const w = makeWorkload(rules);
    // The naive reference scans every rule: check fewer requests for large policies.
    const count = Math.max(200, Math.min(requestCount, Math.floor(2_000_000 / rules)));
    const oracle = w.requests.slice(0, count).map(
      ([u, cap, cls]) =>
        referenceEvaluate(w.definitions, w.doc, {
          traits: [
            ...w.users[u]!.map((r) => `role:r${r}`),
            `capability:c${cap}`,
            `data_access:d${cls}`,
          ],
          context: "BENCH",
        }).decision === "allow",
    );
    const allowed = oracle.filter(Boolean).length;
    notes.push(
      `- ${rules} rules: ${w.classCount} data classes; reference check on ${count} requests (${allowed} allow, ${count - allowed} deny)`,
    );
    for (const make of [traitgateEngine, cedarEngine, casbinEngine]) {
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
