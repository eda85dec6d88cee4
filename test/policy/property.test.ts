import { describe, expect, it } from "vitest";
import {
  compilePolicy,
  type EvaluationRequest,
  loadTraitRegistry,
  type PolicyRule,
  type TraitDefinition,
} from "../../src/policy/index.js";
import { referenceEvaluate } from "../../src/policy/reference.js";
import { seededRandom } from "./helpers.js";

/**
 * The compiled engine (interning, closures as bit sets, the trait index,
 * scratch state reused across calls) against the plain reference evaluator,
 * on randomized registries, policies and requests from fixed seeds.
 */
const categories = ["role", "capability", "data_access", "security"] as const;
const contexts = ["USER_ACTION", "SEARCH", "PLUGIN_INTERACTION"];
const conditions = [
  "request.resource.level > 5",
  "request.resource.missing == 1", // fails at run time: deny
  'request.traits.exists(t, t == "role:t3")',
  "request.user_id == 'u1'",
];

function scenario(seed: number, traitCount: number, ruleCount: number) {
  const rand = seededRandom(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const names = Array.from(
    { length: traitCount },
    (_, i) => `${categories[i % categories.length]}:t${i}`,
  );
  // Implications only towards higher indexes: a DAG, up to several levels deep.
  const definitions: TraitDefinition[] = names.map((name, i) => ({
    name,
    implies: names.filter((_, j) => j > i && rand() < 2.5 / traitCount),
  }));
  const withConflicts = definitions.map((d) => ({ ...d }));
  for (let k = 0; k < 3; k++) {
    const a = Math.floor(rand() * traitCount);
    const b = Math.floor(rand() * traitCount);
    if (a !== b) withConflicts[a]!.conflicts = [...(withConflicts[a]!.conflicts ?? []), names[b]!];
  }
  let registryDefs: TraitDefinition[] = withConflicts;
  let registry: ReturnType<typeof loadTraitRegistry>;
  try {
    registry = loadTraitRegistry(withConflicts);
  } catch {
    registryDefs = definitions; // a drawn conflict made a trait conflict with itself
    registry = loadTraitRegistry(definitions);
  }
  const some = (max: number) => {
    const n = Math.floor(rand() * (max + 1));
    return [...new Set(Array.from({ length: n }, () => pick(names)))];
  };
  const rules: PolicyRule[] = Array.from({ length: ruleCount }, (_, r) => {
    // Fewer deny rules in larger policies, so that allow and sanitize still decide some requests.
    const decision =
      rand() < 40 / (ruleCount + 120) ? "deny" : pick(["allow", "sanitize"] as const);
    const all = rand() < 0.1 ? [] : [pick(names), ...some(1)];
    const rule: PolicyRule = {
      id: `r${r}`,
      description: `rule ${r}`,
      contexts: rand() < 0.15 ? ["*"] : [...new Set([pick(contexts), pick(contexts)])],
      when: {
        all,
        // Rules with neither all nor any (the index's "always" list): never deny, or they would decide everything.
        any:
          all.length === 0 && (decision === "deny" || rand() < 0.7)
            ? [pick(names), ...some(2)]
            : some(rand() < 0.5 ? 0 : 3),
        none: some(rand() < 0.6 ? 0 : 2),
      },
      decision,
    };
    if (decision === "sanitize") rule.sanitize = { fields: [`f${r}`], classifications: [] };
    if (rand() < Math.min(0.08, 6 / ruleCount)) rule.condition = pick(conditions);
    return rule;
  });
  const requests: EvaluationRequest[] = Array.from({ length: 400 }, () => ({
    traits: some(4),
    context: rand() < 0.1 ? "OTHER" : pick(contexts),
    userId: pick(["u1", "u2"]),
    resource: { level: Math.floor(rand() * 10) },
  }));
  return { registryDefs, registry, doc: { rules }, requests };
}

describe("compiled engine = reference evaluator (randomized, fixed seeds)", () => {
  it.each([
    [1, 12, 5],
    [2, 24, 40],
    [3, 40, 200],
    [4, 64, 600],
    [5, 100, 1500],
  ])("seed %i: %i traits, %i rules", (seed, traitCount, ruleCount) => {
    const { registryDefs, registry, doc, requests } = scenario(seed, traitCount, ruleCount);
    const engine = compilePolicy(doc, registry);
    const seen = new Set<string>();
    for (const request of requests) {
      const want = referenceEvaluate(registryDefs, doc, request);
      const got = engine.evaluate(request);
      seen.add(want.reasonCode);
      expect(
        { decision: got.decision, reasonCode: got.reasonCode, matchedRules: [...got.matchedRules] },
        JSON.stringify(request),
      ).toEqual(want);
    }
    // The scenarios exercise more than one outcome.
    expect(seen.size).toBeGreaterThanOrEqual(3);
  });
});
