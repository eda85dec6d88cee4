import type { PolicyEngine } from "./engine.js";
import type { TraitDerivation } from "./explain.js";
import type { Decision, EvaluationRequest, PolicyRule } from "./types.js";

const rulesById = new WeakMap<PolicyEngine, ReadonlyMap<string, PolicyRule>>();

function ruleIndex(engine: PolicyEngine): ReadonlyMap<string, PolicyRule> {
  let index = rulesById.get(engine);
  if (index === undefined) {
    index = new Map(engine.document.rules.map((rule) => [rule.id, rule]));
    rulesById.set(engine, index);
  }
  return index;
}

/**
 * How the implied traits a decision used were derived: for every trait a matched rule
 * required (`all`, `any`) that the caller did not give, the shortest chain of `implies`
 * from a given trait (`role:admin → role:operator → role:analyst`). Cheaper than
 * `explain` (only the matched rules are looked at), so every answer can carry it.
 */
export function derivationsUsed(
  engine: PolicyEngine,
  request: EvaluationRequest,
  decision: Decision,
): TraitDerivation[] {
  if (decision.matchedRules.length === 0) return [];
  const { registry } = engine;
  const given = new Set<number>();
  for (const trait of request.traits) {
    const id = registry.idOf(trait);
    if (id !== undefined) given.add(id);
  }
  for (const name of request.classifications ?? []) {
    const id = registry.idOf(`data_access:${name}`);
    if (id !== undefined) given.add(id);
  }
  const out: TraitDerivation[] = [];
  const done = new Set<number>();
  const rules = ruleIndex(engine);
  for (const ruleId of decision.matchedRules) {
    const rule = rules.get(ruleId);
    if (rule === undefined) continue;
    for (const name of [...(rule.when.all ?? []), ...(rule.when.any ?? [])]) {
      const target = registry.idOf(name);
      if (target === undefined || given.has(target) || done.has(target)) continue;
      done.add(target);
      let best: number[] | undefined;
      for (const from of given) {
        const path = registry.derivation(from, target);
        if (path !== undefined && (best === undefined || path.length < best.length)) best = path;
      }
      if (best !== undefined) {
        out.push({ trait: name, via: best.map((id) => registry.names[id]!) });
      }
    }
  }
  return out;
}
