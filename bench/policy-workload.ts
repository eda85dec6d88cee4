import {
  type EvaluationRequest,
  loadTraitRegistry,
  type PolicyDocument,
  type PolicyRule,
  type TraitDefinition,
  validatePolicy,
} from "../src/policy/index.js";
import { referenceEvaluate } from "../src/policy/reference.js";

/**
 * The policy benchmark's workload, shared by the in-process comparison (bench/policy.ts),
 * the service comparison (bench/policy-service.ts) and the peers' adapters (bench/peers/).
 *
 * Deterministic: 50 roles in an inheritance tree (role i implies roles 2i+1 and 2i+2, so
 * role 0 holds all), 200 users with one or two roles, 5 capabilities, max(10, rules/25)
 * data classes; each rule is a distinct (role, capability, data class) triple that allows
 * (80 %) or denies (20 %); 10,000 requests (user, capability, data class), biased towards
 * triples some rule names.
 */

export const roleCount = 50;
export const userCount = 200;
export const capabilityCount = 5;
export const requestCount = 10_000;
export const ruleCounts = [10, 100, 200, 1_000, 10_000];

export interface Workload {
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

export const juniorRoles = (i: number) => [2 * i + 1, 2 * i + 2].filter((j) => j < roleCount);

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
export interface Engine {
  name: string;
  decide: (i: number) => boolean;
}

/** Request i as Traitgate's engine and service take it (roles as given; the registry expands). */
export function traitgateRequest(w: Workload, i: number): EvaluationRequest {
  const [u, cap, cls] = w.requests[i]!;
  return {
    traits: [...w.users[u]!.map((r) => `role:r${r}`), `capability:c${cap}`, `data_access:d${cls}`],
    context: "BENCH",
  };
}

/** Every role a user holds, its own and the ones they imply (what a PEP hands Cerbos). */
export function reachableRoles(roles: readonly number[]): number[] {
  const reach = new Set<number>();
  const visit = (r: number) => {
    if (reach.has(r)) return;
    reach.add(r);
    for (const j of juniorRoles(r)) visit(j);
  };
  for (const r of roles) visit(r);
  return [...reach].sort((a, b) => a - b);
}

/** The reference evaluator's answer (allow = true) for request i. */
export const oracleAnswer = (w: Workload, i: number): boolean =>
  referenceEvaluate(w.definitions, w.doc, traitgateRequest(w, i)).decision === "allow";

/** The reference evaluator's answers for the first `count` requests. */
export function oracleAnswers(w: Workload, count: number): boolean[] {
  return w.requests.slice(0, count).map((_, i) => oracleAnswer(w, i));
}

/**
 * The workload as the policy service can activate it: activation refuses rules the analysis
 * proves dead (shadowed by a stronger rule, or never matching), so they are left out. That
 * changes no decision (a shadowed rule never decides); every engine gets the same document.
 */
export function serviceWorkload(rules: number): { workload: Workload; dropped: number } {
  const w = makeWorkload(rules);
  const issues = validatePolicy(w.doc, loadTraitRegistry(w.definitions));
  const dead = new Set(issues.map((i) => i.ruleId));
  const kept = w.doc.rules.filter((r) => !dead.has(r.id));
  return { workload: { ...w, doc: { rules: kept } }, dropped: w.doc.rules.length - kept.length };
}
