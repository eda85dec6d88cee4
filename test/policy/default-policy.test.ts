import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DomainError } from "../../src/errors.js";
import {
  compilePolicy,
  createTraitRegistry,
  defaultPolicy,
  type EvaluationRequest,
  validatePolicy,
} from "../../src/policy/index.js";

/**
 * The shipped policy as a table (test/policy/cases/default-policy.json):
 * request → decision, deciding rule and reason code, or the error reason of a
 * refused request. The same file can drive the service over REST and gRPC.
 */
interface Case {
  name: string;
  request: EvaluationRequest;
  want: { decision?: string; deciding_rule?: string; reason_code?: string; error?: string };
}

const cases = JSON.parse(
  readFileSync(join(import.meta.dirname, "cases/default-policy.json"), "utf8"),
) as Case[];
const registry = createTraitRegistry();
const engine = compilePolicy(defaultPolicy, registry);

describe("shipped default policy", () => {
  it("validates without issues (no unknown trait, dead or shadowed rule)", () => {
    expect(validatePolicy(defaultPolicy, registry)).toEqual([]);
  });

  it("has a table of at least 60 cases in which every rule matches at least once", () => {
    expect(cases.length).toBeGreaterThanOrEqual(60);
    const matched = new Set(
      cases
        .filter((c) => c.want.error === undefined)
        .flatMap((c) => engine.evaluate(c.request).matchedRules),
    );
    const uncovered = defaultPolicy.rules.map((r) => r.id).filter((id) => !matched.has(id));
    expect(uncovered).toEqual([]);
  });

  it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, { request, want }) => {
    if (want.error !== undefined) {
      let thrown: unknown;
      try {
        engine.evaluate(request);
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(DomainError);
      expect((thrown as DomainError).reason).toBe(want.error);
      expect((thrown as DomainError).kind).toBe("invalid_argument");
      return;
    }
    const got = engine.evaluate(request);
    expect(got.decision).toBe(want.decision);
    if (want.deciding_rule !== undefined) expect(got.decidingRule).toBe(want.deciding_rule);
    if (want.reason_code !== undefined) expect(got.reasonCode).toBe(want.reason_code);
    // A sanitize answer always says what to take out; others never do.
    expect(got.sanitize !== undefined).toBe(got.decision === "sanitize");
  });

  it("unions the sanitize specs of every matched sanitize rule", () => {
    const got = engine.evaluate({
      traits: ["role:operator", "compliance:hipaa"],
      context: "USER_ACTION",
      classifications: ["phi", "financial"],
    });
    expect(got.decision).toBe("sanitize");
    expect([...(got.sanitize?.classifications ?? [])].sort()).toEqual(["financial", "phi", "pii"]);
  });

  it("gates UI features by role", () => {
    expect(engine.uiFeatures(["role:viewer"])).toEqual([
      "ui_feature:dashboard",
      "ui_feature:search",
    ]);
    expect(engine.uiFeatures(["role:admin"])).not.toContain("ui_feature:admin_console");
    expect(engine.uiFeatures(["role:admin", "security:mfa"])).toContain("ui_feature:admin_console");
    expect(engine.uiFeatures(["role:physician", "compliance:hipaa"])).toEqual([
      "ui_feature:dashboard",
      "ui_feature:search",
      "ui_feature:phi_viewer",
    ]);
    expect(engine.uiFeatures(["role:admin", "security:mfa", "security:locked"])).toEqual([]);
  });
});
