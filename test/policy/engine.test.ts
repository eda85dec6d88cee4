import { describe, expect, it } from "vitest";
import {
  compilePolicy,
  loadTraitRegistry,
  type PolicyDocument,
  type PolicyRule,
  PolicyValidationError,
  validatePolicy,
} from "../../src/policy/index.js";
import { domainErrorOf } from "./helpers.js";

const registry = loadTraitRegistry([
  { name: "role:admin", implies: ["role:operator"] },
  { name: "role:operator", implies: ["role:viewer"] },
  { name: "role:viewer", implies: ["capability:read"] },
  { name: "capability:read" },
  { name: "capability:export" },
  { name: "data_access:public" },
  { name: "data_access:pii" },
  { name: "data_access:phi", implies: ["data_access:pii"] },
  { name: "compliance:hipaa" },
  { name: "plugin_type:internal", conflicts: ["plugin_type:external"] },
  { name: "plugin_type:external" },
  { name: "security:mfa" },
]);

const rule = (
  r: Partial<PolicyRule> & Pick<PolicyRule, "id" | "decision" | "when">,
): PolicyRule => ({
  description: r.id,
  contexts: ["USER_ACTION"],
  ...r,
  ...(r.decision === "sanitize" && !r.sanitize
    ? { sanitize: { fields: [`${r.id}_field`], classifications: [] } }
    : {}),
});

const engineOf = (...rules: PolicyRule[]) => compilePolicy({ rules }, registry);

describe("evaluate: combining", () => {
  const engine = engineOf(
    rule({ id: "read", decision: "allow", when: { all: ["capability:read"] } }),
    rule({ id: "pii-mask", decision: "sanitize", when: { all: ["data_access:pii"] } }),
    rule({ id: "phi-mask", decision: "sanitize", when: { all: ["data_access:phi"] } }),
    rule({
      id: "phi-hipaa",
      decision: "deny",
      when: { all: ["data_access:phi"], none: ["compliance:hipaa"] },
    }),
  );

  it("allows when only allow rules match", () => {
    const d = engine.evaluate({ traits: ["role:viewer"], context: "USER_ACTION" });
    expect(d).toMatchObject({ decision: "allow", reasonCode: "RULE_ALLOW", decidingRule: "read" });
    expect(d.matchedRules).toEqual(["read"]);
    expect(d.sanitize).toBeUndefined();
  });

  it("sanitize beats allow, and the specs of every matched sanitize rule are merged", () => {
    const d = engine.evaluate({
      traits: ["role:viewer", "compliance:hipaa"],
      context: "USER_ACTION",
      classifications: ["phi"],
    });
    expect(d.decision).toBe("sanitize");
    expect(d.decidingRule).toBe("pii-mask");
    expect(d.matchedRules).toEqual(["read", "pii-mask", "phi-mask"]);
    expect([...d.sanitize!.fields].sort()).toEqual(["phi-mask_field", "pii-mask_field"]);
  });

  it("deny beats sanitize and allow", () => {
    const d = engine.evaluate({
      traits: ["role:admin", "data_access:phi"],
      context: "USER_ACTION",
    });
    expect(d).toMatchObject({
      decision: "deny",
      reasonCode: "RULE_DENY",
      decidingRule: "phi-hipaa",
    });
    expect(d.matchedRules).toEqual(["read", "pii-mask", "phi-mask", "phi-hipaa"]);
    expect(d.sanitize).toBeUndefined();
  });

  it("answers a set of matched rules with one frozen answer, whichever traits matched it", () => {
    const asked = (traits: string[]) =>
      engine.evaluate({ traits, context: "USER_ACTION", classifications: ["phi"] });
    const first = asked(["role:viewer", "compliance:hipaa"]);
    // Another way to the same rules: the same answer, kept (so the audit record keeps its value
    // by identity and builds no key for it).
    const again = asked(["capability:read", "compliance:hipaa"]);
    expect(again).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(Object.isFrozen(first.matchedRules)).toBe(true);
    expect(Object.isFrozen(first.sanitize)).toBe(true);
    expect(Object.isFrozen(first.sanitize?.fields)).toBe(true);
    // Another set: another answer.
    const other = asked(["role:viewer"]);
    expect(other.matchedRules).toEqual(["read", "pii-mask", "phi-mask", "phi-hipaa"]);
    expect(other).not.toBe(first);
    expect(asked(["role:viewer"])).toBe(other);
  });

  it("denies when nothing matches (fail closed)", () => {
    const d = engine.evaluate({ traits: ["capability:export"], context: "USER_ACTION" });
    expect(d).toMatchObject({ decision: "deny", reasonCode: "NO_MATCH", decidingRule: undefined });
    expect(d.matchedRules).toEqual([]);
  });

  it("denies conflicting traits, also when one comes by implication", () => {
    const e = engineOf(
      rule({
        id: "any-plugin",
        decision: "allow",
        when: { any: ["plugin_type:internal", "plugin_type:external"] },
      }),
    );
    expect(e.evaluate({ traits: ["plugin_type:internal"], context: "USER_ACTION" }).decision).toBe(
      "allow",
    );
    const d = e.evaluate({
      traits: ["plugin_type:internal", "plugin_type:external"],
      context: "USER_ACTION",
    });
    expect(d).toMatchObject({ decision: "deny", reasonCode: "TRAIT_CONFLICT" });
    expect(d.reason).toContain("plugin_type:internal");
  });

  it("applies any and none with implied traits", () => {
    const e = engineOf(
      rule({
        id: "ops",
        decision: "allow",
        when: { any: ["role:operator", "security:mfa"], none: ["data_access:pii"] },
      }),
    );
    expect(e.evaluate({ traits: ["role:admin"], context: "USER_ACTION" }).decision).toBe("allow");
    expect(e.evaluate({ traits: ["security:mfa"], context: "USER_ACTION" }).decision).toBe("allow");
    expect(e.evaluate({ traits: ["role:viewer"], context: "USER_ACTION" }).reasonCode).toBe(
      "NO_MATCH",
    );
    // phi implies pii, which the rule excludes.
    expect(
      e.evaluate({ traits: ["role:admin", "data_access:phi"], context: "USER_ACTION" }).reasonCode,
    ).toBe("NO_MATCH");
  });
});

describe("evaluate: contexts", () => {
  const engine = engineOf(
    rule({
      id: "in-search",
      contexts: ["SEARCH"],
      decision: "allow",
      when: { all: ["role:viewer"] },
    }),
    rule({
      id: "everywhere",
      contexts: ["*"],
      decision: "sanitize",
      when: { all: ["data_access:pii"] },
    }),
  );

  it("only rules of the request's context (or *) apply", () => {
    expect(engine.evaluate({ traits: ["role:viewer"], context: "SEARCH" }).decision).toBe("allow");
    expect(engine.evaluate({ traits: ["role:viewer"], context: "USER_ACTION" }).reasonCode).toBe(
      "NO_MATCH",
    );
  });

  it("wildcard rules apply in named contexts and in contexts no rule names", () => {
    expect(
      engine.evaluate({ traits: ["role:viewer", "data_access:pii"], context: "SEARCH" })
        .matchedRules,
    ).toEqual(["in-search", "everywhere"]);
    expect(engine.evaluate({ traits: ["data_access:pii"], context: "ELSEWHERE" }).decision).toBe(
      "sanitize",
    );
  });
});

describe("evaluate: CEL conditions", () => {
  const engine = engineOf(
    rule({ id: "read", decision: "allow", when: { all: ["role:viewer"] } }),
    rule({
      id: "own-records",
      decision: "deny",
      when: { all: ["role:viewer"] },
      condition: "request.resource.owner != request.user_id",
    }),
  );

  it("a true condition matches, a false one does not", () => {
    const own = engine.evaluate({
      traits: ["role:viewer"],
      context: "USER_ACTION",
      userId: "u1",
      resource: { owner: "u1" },
    });
    expect(own).toMatchObject({ decision: "allow", matchedRules: ["read"] });
    const other = engine.evaluate({
      traits: ["role:viewer"],
      context: "USER_ACTION",
      userId: "u1",
      resource: { owner: "u2" },
    });
    expect(other).toMatchObject({ decision: "deny", decidingRule: "own-records" });
  });

  it("a condition that fails at run time denies, with the reason recorded", () => {
    const d = engine.evaluate({ traits: ["role:viewer"], context: "USER_ACTION", userId: "u1" });
    expect(d.decision).toBe("deny");
    expect(d.reasonCode).toBe("EVALUATION_ERROR");
    expect(d.decidingRule).toBe("own-records");
    expect(d.errors).toEqual([
      { ruleId: "own-records", message: expect.stringContaining("owner") },
    ]);
    expect(d.reason).toContain("own-records");
  });

  it("a condition that does not yield a boolean denies", () => {
    const e = engineOf(
      rule({ id: "odd", decision: "allow", when: {}, condition: "request.user_id" }),
    );
    expect(e.evaluate({ traits: [], context: "USER_ACTION", userId: "x" })).toMatchObject({
      decision: "deny",
      reasonCode: "EVALUATION_ERROR",
    });
  });

  it("conditions see the implied traits", () => {
    const e = engineOf(
      rule({
        id: "cel-traits",
        decision: "allow",
        when: {},
        condition: '"capability:read" in request.traits',
      }),
    );
    expect(e.evaluate({ traits: ["role:admin"], context: "USER_ACTION" }).decision).toBe("allow");
    expect(e.evaluate({ traits: ["security:mfa"], context: "USER_ACTION" }).decision).toBe("deny");
  });
});

describe("request validation", () => {
  const engine = engineOf(rule({ id: "read", decision: "allow", when: { all: ["role:viewer"] } }));
  it.each([
    ["role", "TRAIT_MALFORMED"],
    ["role:Viewer", "TRAIT_MALFORMED"],
    ["team:red", "TRAIT_UNKNOWN_CATEGORY"],
    ["role:ghost", "TRAIT_UNREGISTERED"],
  ])("trait %s is refused with %s naming it", (trait, reason) => {
    const err = domainErrorOf(() =>
      engine.evaluate({ traits: ["role:viewer", trait], context: "USER_ACTION" }),
    );
    expect(err.kind).toBe("invalid_argument");
    expect(err.reason).toBe(reason);
    expect(err.field).toBe("traits[1]");
  });

  it("an unknown classification is refused", () => {
    const err = domainErrorOf(() =>
      engine.evaluate({ traits: [], context: "USER_ACTION", classifications: ["secretish"] }),
    );
    expect(err.reason).toBe("CLASSIFICATION_UNKNOWN");
  });

  it("batch evaluation answers in order and names the bad request", () => {
    const answers = engine.evaluateBatch([
      { traits: ["role:admin"], context: "USER_ACTION" },
      { traits: [], context: "USER_ACTION" },
    ]);
    expect(answers.map((a) => a.decision)).toEqual(["allow", "deny"]);
    const err = domainErrorOf(() =>
      engine.evaluateBatch([
        { traits: [], context: "X" },
        { traits: ["nope"], context: "X" },
      ]),
    );
    expect(err.field).toBe("requests[1].traits[0]");
  });
});

describe("policy validation", () => {
  const issuesOf = (rules: unknown[]) => validatePolicy({ rules }, registry);

  it("reports every structural problem with the rule id and field", () => {
    const issues = issuesOf([
      {
        id: "ok",
        description: "d",
        contexts: ["USER_ACTION"],
        when: { all: ["role:viewer"] },
        decision: "allow",
      },
      {
        id: "ok",
        description: "",
        contexts: [],
        when: { all: ["role:ghost"], most: [] },
        decision: "maybe",
        extra: 1,
      },
      {
        id: "bad-cel",
        description: "d",
        contexts: ["lower"],
        when: {},
        decision: "allow",
        condition: "request.x ==",
      },
      {
        id: "bad-var",
        description: "d",
        contexts: ["*"],
        when: {},
        decision: "allow",
        condition: "user.id == 1",
      },
      { id: "no-spec", description: "d", contexts: ["*"], when: {}, decision: "sanitize" },
      {
        id: "bad-spec",
        description: "d",
        contexts: ["*"],
        when: {},
        decision: "sanitize",
        sanitize: { fields: ["a..b"], classifications: ["secretish"] },
      },
    ]);
    const got = issues.map((i) => `${i.ruleId ?? "-"} ${i.field} ${i.reason}`);
    expect(got).toEqual(
      expect.arrayContaining([
        "ok rules[1].id RULE_ID_DUPLICATE",
        "ok rules[1].description RULE_DESCRIPTION_MISSING",
        "ok rules[1].contexts RULE_CONTEXTS_INVALID",
        "ok rules[1].when.most UNKNOWN_FIELD",
        "ok rules[1].when.all[0] TRAIT_UNREGISTERED",
        "ok rules[1].decision RULE_DECISION_INVALID",
        "ok rules[1].extra UNKNOWN_FIELD",
        "bad-cel rules[2].contexts[0] RULE_CONTEXT_INVALID",
        "bad-cel rules[2].condition RULE_CONDITION_INVALID",
        "bad-var rules[3].condition RULE_CONDITION_INVALID",
        "no-spec rules[4].sanitize RULE_SANITIZE_MISSING",
        "bad-spec rules[5].sanitize.fields[0] RULE_SANITIZE_INVALID",
        "bad-spec rules[5].sanitize.classifications[0] RULE_SANITIZE_INVALID",
      ]),
    );
    expect(issues).toHaveLength(13);
  });

  it("compiling an invalid policy throws every issue, the first one as the error", () => {
    const err = domainErrorOf(() =>
      compilePolicy(
        { rules: [rule({ id: "r", decision: "allow", when: { all: ["role:ghost"] } })] },
        registry,
      ),
    );
    expect(err).toBeInstanceOf(PolicyValidationError);
    expect(err.reason).toBe("TRAIT_UNREGISTERED");
    expect(err.field).toBe("rules[0].when.all[0]");
    expect(err.metadata.rule_id).toBe("r");
  });

  it("finds rules that can never match and rules shadowed by a stronger rule", () => {
    const doc: PolicyDocument = {
      rules: [
        rule({
          id: "self-excluding",
          decision: "allow",
          when: { all: ["role:admin"], none: ["role:viewer"] },
        }),
        rule({
          id: "conflicting",
          decision: "allow",
          when: { all: ["plugin_type:internal", "plugin_type:external"] },
        }),
        rule({ id: "broad-deny", decision: "deny", when: { all: ["data_access:pii"] } }),
        rule({
          id: "shadowed-allow",
          decision: "allow",
          when: { all: ["data_access:phi", "role:viewer"] },
        }),
        rule({
          id: "narrow-deny",
          contexts: ["SEARCH"],
          decision: "deny",
          when: { all: ["role:viewer"] },
        }),
        rule({ id: "not-shadowed", decision: "allow", when: { all: ["role:viewer"] } }),
      ],
    };
    const got = validatePolicy(doc, registry).map((i) => `${i.ruleId} ${i.reason}`);
    expect(got).toEqual([
      "self-excluding RULE_NEVER_MATCHES",
      "conflicting RULE_NEVER_MATCHES",
      "shadowed-allow RULE_SHADOWED",
    ]);
  });
});

describe("explain", () => {
  const engine = engineOf(
    rule({ id: "read", decision: "allow", when: { all: ["capability:read"] } }),
    rule({
      id: "phi-hipaa",
      decision: "deny",
      when: { all: ["data_access:phi"], none: ["compliance:hipaa"] },
    }),
    rule({ id: "elsewhere", contexts: ["SEARCH"], decision: "allow", when: {} }),
    rule({
      id: "cel",
      decision: "deny",
      when: { all: ["role:viewer"] },
      condition: "request.user_id == 'mallory'",
    }),
  );

  it("gives the evaluator's decision, why each rule matched or not, and the derivations", () => {
    const request = {
      traits: ["role:admin", "compliance:hipaa"],
      context: "USER_ACTION",
      classifications: ["phi"],
      userId: "alice",
    };
    const x = engine.explain(request);
    expect(x.decision).toEqual(engine.evaluate(request));
    const byId = Object.fromEntries(x.rules.map((r) => [r.id, r]));
    expect(byId.read).toMatchObject({ matched: true, candidate: true, missing: [] });
    expect(byId["phi-hipaa"]).toMatchObject({ matched: false, excludedHeld: ["compliance:hipaa"] });
    expect(byId.elsewhere).toMatchObject({ matched: false, inContext: false, candidate: false });
    expect(byId.cel).toMatchObject({ matched: false, condition: "false" });
    expect(x.impliedTraits).toContainEqual({
      trait: "capability:read",
      via: ["role:admin", "role:operator", "role:viewer", "capability:read"],
    });
    expect(x.impliedTraits).toContainEqual({
      trait: "data_access:pii",
      via: ["data_access:phi", "data_access:pii"],
    });
    expect(x.rules.filter((r) => r.matched).map((r) => r.id)).toEqual([...x.decision.matchedRules]);
  });
});

describe("ui features", () => {
  it("lists the ui_feature traits whose gate does not deny", () => {
    const reg = loadTraitRegistry([
      { name: "role:admin", implies: ["role:viewer"] },
      { name: "role:viewer" },
      { name: "security:mfa" },
      { name: "ui_feature:dashboard" },
      { name: "ui_feature:console" },
    ]);
    const engine = compilePolicy(
      {
        rules: [
          {
            id: "dash",
            description: "d",
            contexts: ["UI_RENDER"],
            when: { all: ["ui_feature:dashboard", "role:viewer"] },
            decision: "allow",
          },
          {
            id: "console",
            description: "d",
            contexts: ["UI_RENDER"],
            when: { all: ["ui_feature:console", "role:admin"] },
            decision: "allow",
          },
          {
            id: "console-mfa",
            description: "d",
            contexts: ["UI_RENDER"],
            when: { all: ["ui_feature:console"], none: ["security:mfa"] },
            decision: "deny",
          },
        ],
      },
      reg,
    );
    expect(engine.uiFeatures(["role:viewer"])).toEqual(["ui_feature:dashboard"]);
    expect(engine.uiFeatures(["role:admin"])).toEqual(["ui_feature:dashboard"]);
    expect(engine.uiFeatures(["role:admin", "security:mfa"])).toEqual([
      "ui_feature:dashboard",
      "ui_feature:console",
    ]);
  });
});

describe("policy version", () => {
  it("is the content hash: key order does not matter, content does", () => {
    const a = engineOf(rule({ id: "r", decision: "allow", when: { all: ["role:viewer"] } }));
    const b = compilePolicy(
      {
        rules: [
          {
            when: { all: ["role:viewer"] },
            decision: "allow",
            id: "r",
            contexts: ["USER_ACTION"],
            description: "r",
          },
        ],
      },
      registry,
    );
    const c = engineOf(rule({ id: "r", decision: "deny", when: { all: ["role:viewer"] } }));
    expect(a.version).toMatch(/^[0-9a-f]{64}$/);
    expect(b.version).toBe(a.version);
    expect(c.version).not.toBe(a.version);
  });
});
