import { describe, expect, it } from "vitest";
import { derivationsUsed } from "../../src/policy/derivation.js";
import { compilePolicy, loadTraitRegistry, type PolicyRule } from "../../src/policy/index.js";
import type { TraitRegistry } from "../../src/policy/registry.js";

/**
 * The derivations an answer carries (`implied_traits`): the same as a fresh search of the
 * registry's graph, found once per pair of traits and policy version (each decision used to
 * search the graph again, most of a batch's cost).
 */

const rules: PolicyRule[] = [
  {
    id: "read",
    description: "read",
    contexts: ["USER_ACTION"],
    decision: "allow",
    when: { all: ["capability:read", "data_access:pii"] },
  },
];

/** The registry with its searches counted. */
function counted(registry: TraitRegistry): { registry: TraitRegistry; searches: () => number } {
  let n = 0;
  return {
    registry: {
      ...registry,
      derivation: (from, to) => {
        n++;
        return registry.derivation(from, to);
      },
    },
    searches: () => n,
  };
}

const chain = loadTraitRegistry([
  { name: "role:admin", implies: ["role:operator"] },
  { name: "role:operator", implies: ["role:viewer"] },
  { name: "role:viewer", implies: ["capability:read"] },
  { name: "capability:read" },
  { name: "data_access:pii" },
  { name: "data_access:phi", implies: ["data_access:pii"] },
]);
const request = {
  traits: ["role:viewer", "role:admin"],
  context: "USER_ACTION",
  classifications: ["phi"],
};

describe("derivationsUsed", () => {
  it("gives the shortest chain from a given trait to each required one", () => {
    const engine = compilePolicy({ rules }, chain);
    const d = engine.evaluate(request);
    expect(d.matchedRules).toEqual(["read"]);
    expect(derivationsUsed(engine, request, d)).toEqual([
      { trait: "capability:read", via: ["role:viewer", "capability:read"] },
      { trait: "data_access:pii", via: ["data_access:phi", "data_access:pii"] },
    ]);
    // Nothing to derive: the required traits were given.
    const direct = { traits: ["capability:read", "data_access:pii"], context: "USER_ACTION" };
    expect(derivationsUsed(engine, direct, engine.evaluate(direct))).toEqual([]);
  });

  it("searches the graph once per pair of traits, not once per decision", () => {
    const { registry, searches } = counted(chain);
    const engine = compilePolicy({ rules }, registry);
    const d = engine.evaluate(request);
    const first = derivationsUsed(engine, request, d);
    const after = searches();
    expect(after).toBeGreaterThan(0);
    for (let i = 0; i < 50; i++) {
      expect(derivationsUsed(engine, { ...request, traits: [...request.traits] }, d)).toEqual(
        first,
      );
    }
    expect(searches()).toBe(after);
    // The shared lists cannot be changed by one answer's reader.
    expect(Object.isFrozen(first[0]?.via)).toBe(true);
  });

  it("answers each policy version from its own registry", () => {
    const engine = compilePolicy({ rules }, chain);
    expect(derivationsUsed(engine, request, engine.evaluate(request))[0]?.via).toEqual([
      "role:viewer",
      "capability:read",
    ]);
    // The next version: role:viewer no longer implies capability:read; role:admin does.
    const next = loadTraitRegistry([
      { name: "role:admin", implies: ["role:operator", "capability:read"] },
      { name: "role:operator", implies: ["role:viewer"] },
      { name: "role:viewer" },
      { name: "capability:read" },
      { name: "data_access:pii" },
      { name: "data_access:phi", implies: ["data_access:pii"] },
    ]);
    const engine2 = compilePolicy({ rules }, next);
    expect(derivationsUsed(engine2, request, engine2.evaluate(request))[0]?.via).toEqual([
      "role:admin",
      "capability:read",
    ]);
  });

  it("agrees with explain on random requests: shortest chains, ties to the first given, repeats", () => {
    const registry = loadTraitRegistry([
      { name: "role:root", implies: ["role:left", "role:right"] },
      { name: "role:left", implies: ["role:leaf", "capability:read"] },
      { name: "role:right", implies: ["role:leaf", "capability:write"] },
      { name: "role:leaf", implies: ["capability:read"] },
      { name: "role:side", implies: ["capability:write", "capability:read"] },
      { name: "capability:read" },
      { name: "capability:write" },
      { name: "data_access:pii" },
      { name: "data_access:phi", implies: ["data_access:pii"] },
    ]);
    const many: PolicyRule[] = [
      { ...rules[0]!, id: "r1", when: { all: ["capability:read"] } },
      { ...rules[0]!, id: "r2", when: { all: ["capability:write", "capability:read"] } },
      { ...rules[0]!, id: "r3", when: { any: ["role:leaf", "data_access:pii"] } },
      { ...rules[0]!, id: "r4", when: { all: ["role:left"], any: ["capability:write"] } },
    ];
    const engine = compilePolicy({ rules: many }, registry);
    const traits = ["role:root", "role:left", "role:right", "role:leaf", "role:side"];
    let state = 7;
    const next = (n: number) => {
      state = (state * 1103515245 + 12345) % 2 ** 31;
      return state % n;
    };
    for (let k = 0; k < 300; k++) {
      const given = Array.from({ length: 1 + next(4) }, () => traits[next(traits.length)]!);
      const request = {
        traits: given,
        context: "USER_ACTION",
        ...(next(2) ? { classifications: ["phi"] } : {}),
      };
      const d = engine.evaluate(request);
      const explained = engine.explain(request).impliedTraits;
      const byTrait = new Map(explained.map((t) => [t.trait, t.via]));
      const required = many
        .filter((r) => d.matchedRules.includes(r.id))
        .flatMap((r) => [...(r.when.all ?? []), ...(r.when.any ?? [])]);
      const want = [...new Set(required)]
        .filter((t) => byTrait.has(t))
        .map((t) => ({ trait: t, via: byTrait.get(t) }));
      expect(derivationsUsed(engine, request, d), JSON.stringify(request)).toEqual(want);
    }
  });
});
