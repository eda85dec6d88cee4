import type { PolicyEngine } from "./engine.js";
import type { TraitDerivation } from "./explain.js";
import type { Decision, EvaluationRequest } from "./types.js";

/**
 * What derivationsUsed needs of an engine, built once per engine (a policy version) at its
 * first decision: for each rule, the registered traits it requires (`all`, then `any`), and
 * the implication paths found so far, by (from, to). A decision then looks up what it used
 * instead of searching the registry's graph again.
 */
interface DerivationIndex {
  required: ReadonlyMap<string, readonly Target[]>;
  /** The targets of a frozen matched-rules list (the engine's answers share theirs). */
  targets: WeakMap<readonly string[], readonly Target[]>;
  /** Path names by `from * traits + to`; null: no path. Bounded (cleared when full). */
  paths: Map<number, readonly string[] | null>;
}

/** A registered trait a rule requires. */
interface Target {
  id: number;
  name: string;
}

/** Enough for every pair a real registry's principals use; a pathological one starts over. */
const maxPaths = 65_536;

const indexes = new WeakMap<PolicyEngine, DerivationIndex>();

function indexOf(engine: PolicyEngine): DerivationIndex {
  let index = indexes.get(engine);
  if (index === undefined) {
    const { registry } = engine;
    const required = new Map<string, Target[]>();
    for (const rule of engine.document.rules) {
      const list: Target[] = [];
      for (const name of [...(rule.when.all ?? []), ...(rule.when.any ?? [])]) {
        const id = registry.idOf(name);
        if (id !== undefined) list.push({ id, name });
      }
      required.set(rule.id, list);
    }
    index = { required, targets: new WeakMap(), paths: new Map() };
    indexes.set(engine, index);
  }
  return index;
}

/** The names along the shortest implication path from → to, or null; found once per pair. */
function pathNames(engine: PolicyEngine, index: DerivationIndex, from: number, to: number) {
  const { registry } = engine;
  const key = from * registry.names.length + to;
  let names = index.paths.get(key);
  if (names === undefined) {
    const path = registry.derivation(from, to);
    names = path === undefined ? null : Object.freeze(path.map((id) => registry.names[id]!));
    if (index.paths.size >= maxPaths) index.paths.clear();
    index.paths.set(key, names);
  }
  return names;
}

/**
 * How the implied traits a decision used were derived: for every trait a matched rule
 * required (`all`, `any`) that the caller did not give, the shortest chain of `implies`
 * from a given trait (`role:admin → role:operator → role:analyst`). Cheaper than
 * `explain` (only the matched rules are looked at), so every answer can carry it. The
 * `via` lists are shared between answers and frozen.
 */
export function derivationsUsed(
  engine: PolicyEngine,
  request: EvaluationRequest,
  decision: Decision,
): TraitDerivation[] {
  if (decision.matchedRules.length === 0) return [];
  const index = indexOf(engine);
  const targets = targetsOf(index, decision.matchedRules);
  if (targets.length === 0) return [];
  const { registry } = engine;
  // The given traits' ids in request order (a repeat changes nothing below).
  const given: number[] = [];
  for (const trait of request.traits) {
    const id = registry.idOf(trait);
    if (id !== undefined) given.push(id);
  }
  for (const name of request.classifications ?? []) {
    const id = registry.idOf(`data_access:${name}`);
    if (id !== undefined) given.push(id);
  }
  const out: TraitDerivation[] = [];
  for (const { id: target, name } of targets) {
    if (given.includes(target)) continue;
    let best: readonly string[] | null = null;
    for (const from of given) {
      const path = pathNames(engine, index, from, target);
      if (path !== null && (best === null || path.length < best.length)) best = path;
    }
    if (best !== null) out.push({ trait: name, via: best });
  }
  return out;
}

/** The registered traits the rules require, each once, in rule order (kept for frozen lists). */
function targetsOf(index: DerivationIndex, rules: readonly string[]): readonly Target[] {
  let targets = index.targets.get(rules);
  if (targets !== undefined) return targets;
  const seen = new Set<number>();
  const list: Target[] = [];
  for (const ruleId of rules) {
    for (const target of index.required.get(ruleId) ?? []) {
      if (!seen.has(target.id)) {
        seen.add(target.id);
        list.push(target);
      }
    }
  }
  targets = list;
  if (Object.isFrozen(rules)) index.targets.set(rules, targets);
  return targets;
}
