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
});
