import type { DecisionAnswer } from "../../src/policy/decisions.js";

/** A derivation's path, frozen as the engine's are. */
export const via = Object.freeze(["role:clinician", "role:staff"]);

/** An answer with every field set, for the answer message and binary tests to vary. */
export const base: DecisionAnswer = {
  decision: "allow",
  reasonCode: "RULE_ALLOW",
  reason: "rule clinical-read allows",
  decidingRule: "clinical-read",
  matchedRules: Object.freeze(["clinical-read", "staff-read"]),
  sanitize: undefined,
  errors: undefined,
  policyVersion: "f".repeat(64),
  decisionId: "0190f3a2-7c1e-7b2a-9d4e-000000000001",
  impliedTraits: [
    { trait: "role:staff", via },
    { trait: "data_access:internal", via: [] },
  ],
};
