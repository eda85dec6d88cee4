import { describe, expect, it } from "vitest";
import { bitsOf } from "../../src/policy/bitset.js";
import {
  createTraitRegistry,
  loadTraitRegistry,
  type TraitRegistry,
  validatePolicy,
} from "../../src/policy/index.js";
import { maxRules } from "../../src/policy/validate.js";
import { domainErrorOf } from "./helpers.js";

const closureNames = (registry: TraitRegistry, name: string): string[] => {
  const id = registry.idOf(name)!;
  return bitsOf(registry.closures, id * registry.words, registry.words)
    .map((t) => registry.names[t]!)
    .sort();
};

describe("trait registry", () => {
  it("refuses malformed traits, unknown categories and unregistered references, naming them", () => {
    const malformed = domainErrorOf(() => loadTraitRegistry([{ name: "role" }]));
    expect(malformed.reason).toBe("TRAIT_MALFORMED");
    expect(malformed.field).toBe("traits[0].name");
    expect(malformed.metadata.trait).toBe("role");

    const upper = domainErrorOf(() => loadTraitRegistry([{ name: "role:Admin" }]));
    expect(upper.reason).toBe("TRAIT_MALFORMED");

    const category = domainErrorOf(() => loadTraitRegistry([{ name: "team:red" }]));
    expect(category.reason).toBe("TRAIT_UNKNOWN_CATEGORY");
    expect(category.metadata.category).toBe("team");

    const ROLE = domainErrorOf(() => loadTraitRegistry([{ name: "ROLE:admin" }]));
    expect(ROLE.reason).toBe("TRAIT_UNKNOWN_CATEGORY");

    const dangling = domainErrorOf(() =>
      loadTraitRegistry([{ name: "role:a", implies: ["role:ghost"] }]),
    );
    expect(dangling.reason).toBe("TRAIT_UNREGISTERED");
    expect(dangling.field).toBe("traits[0].implies[0]");
    expect(dangling.metadata.trait).toBe("role:ghost");

    const twice = domainErrorOf(() => loadTraitRegistry([{ name: "role:a" }, { name: "role:a" }]));
    expect(twice.reason).toBe("TRAIT_DUPLICATE");
  });

  it("computes transitive closures once, including the trait itself", () => {
    const registry = loadTraitRegistry([
      { name: "role:a", implies: ["role:b"] },
      { name: "role:b", implies: ["role:c", "capability:x"] },
      { name: "role:c", implies: ["role:d"] },
      { name: "role:d" },
      { name: "capability:x" },
    ]);
    expect(closureNames(registry, "role:a")).toEqual([
      "capability:x",
      "role:a",
      "role:b",
      "role:c",
      "role:d",
    ]);
    expect(closureNames(registry, "role:d")).toEqual(["role:d"]);
    expect(registry.derivation(0, 3)?.map((id) => registry.names[id])).toEqual([
      "role:a",
      "role:b",
      "role:c",
      "role:d",
    ]);
    expect(registry.derivation(3, 0)).toBeUndefined();
  });

  it("refuses an implication cycle and names it", () => {
    const err = domainErrorOf(() =>
      loadTraitRegistry([
        { name: "role:a", implies: ["role:b"] },
        { name: "role:b", implies: ["role:c"] },
        { name: "role:c", implies: ["role:a"] },
      ]),
    );
    expect(err.reason).toBe("TRAIT_CYCLE");
    expect(err.metadata.cycle).toBe("role:a -> role:b -> role:c -> role:a");
    const self = domainErrorOf(() => loadTraitRegistry([{ name: "role:a", implies: ["role:a"] }]));
    expect(self.metadata.cycle).toBe("role:a -> role:a");
  });

  it("makes conflicts symmetric and carries them through implication", () => {
    const registry = loadTraitRegistry([
      { name: "plugin_type:internal", conflicts: ["plugin_type:external"] },
      { name: "plugin_type:external" },
      { name: "plugin_type:retrieval", implies: ["plugin_type:internal"] },
    ]);
    const { words, conflictClosures, names } = registry;
    const conflictsOf = (name: string) =>
      bitsOf(conflictClosures, registry.idOf(name)! * words, words).map((t) => names[t]);
    expect(conflictsOf("plugin_type:external")).toEqual(["plugin_type:internal"]);
    expect(conflictsOf("plugin_type:retrieval")).toEqual(["plugin_type:external"]);
  });

  it("refuses a trait whose implications conflict with each other", () => {
    const err = domainErrorOf(() =>
      loadTraitRegistry([
        { name: "role:x", implies: ["security:a", "security:b"] },
        { name: "security:a", conflicts: ["security:b"] },
        { name: "security:b" },
      ]),
    );
    expect(err.reason).toBe("TRAIT_SELF_CONFLICT");
    expect(err.metadata.trait).toBe("role:x");
  });

  it("ships the spec's seven categories and admins can register more", () => {
    const registry = createTraitRegistry([
      { name: "role:radiologist", implies: ["role:physician"] },
    ]);
    for (const category of [
      "role",
      "capability",
      "data_access",
      "ui_feature",
      "plugin_type",
      "security",
      "compliance",
    ] as const) {
      expect(registry.inCategory(category).length).toBeGreaterThan(2);
    }
    for (const cls of ["public", "internal", "pii", "phi", "financial"]) {
      expect(registry.idOf(`data_access:${cls}`)).toBeDefined();
    }
    // Three levels down: radiologist ⇒ physician ⇒ clinician ⇒ viewer ⇒ capability:read.
    expect(closureNames(registry, "role:radiologist")).toContain("capability:read");
    expect(closureNames(registry, "role:admin")).toContain("role:viewer");
  });
});

describe("policy size limits", () => {
  it("refuses more than maxRules rules when analysed, and over-long conditions", () => {
    const registry = createTraitRegistry();
    const rule = (i: number) => ({
      id: `r${i}`,
      description: "a test rule",
      contexts: ["USER_ACTION"],
      when: { all: ["role:viewer"] },
      decision: "allow",
    });
    const huge = { rules: Array.from({ length: maxRules + 1 }, (_, i) => rule(i)) };
    expect(validatePolicy(huge, registry).map((i) => i.reason)).toEqual(["POLICY_TOO_LARGE"]);
    expect(validatePolicy(huge, registry, { analyze: false })).toEqual([]);
    const long = { rules: [{ ...rule(0), condition: `${"1 + ".repeat(600)}1 > 0` }] };
    expect(validatePolicy(long, registry).map((i) => i.reason)).toContain("RULE_CONDITION_INVALID");
  });
});
