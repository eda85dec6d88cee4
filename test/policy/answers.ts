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

/**
 * Answers of every shape, for the message and binary tests: every field present and absent,
 * empty and not, lists frozen (as the engine's) and not, strings beyond ASCII (a lone
 * surrogate, 20,000 characters), decision ids across the one-byte length boundary.
 */
export const answerShapes: Record<string, DecisionAnswer> = {
  "an allow": base,
  "a deny without a deciding rule": {
    ...base,
    decision: "deny",
    reasonCode: "NO_MATCH",
    decidingRule: undefined,
    matchedRules: Object.freeze([]),
    impliedTraits: [],
  },
  "a sanitize, frozen": {
    ...base,
    decision: "sanitize",
    matchedRules: Object.freeze(["mask"]),
    sanitize: Object.freeze({
      fields: Object.freeze(["ssn", "dob"]),
      classifications: Object.freeze(["phi"]),
    }),
  },
  "a sanitize, not frozen": {
    ...base,
    decision: "sanitize",
    sanitize: { fields: ["ssn"], classifications: [] },
  },
  "a sanitize with empty lists": {
    ...base,
    decision: "sanitize",
    sanitize: { fields: [], classifications: [] },
  },
  "rule errors": {
    ...base,
    decision: "deny",
    matchedRules: [],
    errors: [
      { ruleId: "r1", message: "condition failed: résumé ≠ ☃" },
      { ruleId: "", message: "" },
    ],
  },
  "empty strings everywhere": {
    ...base,
    reason: "",
    reasonCode: "" as DecisionAnswer["reasonCode"],
    decidingRule: "",
    matchedRules: Object.freeze(["", "x"]),
    policyVersion: "",
    decisionId: "",
    impliedTraits: [{ trait: "", via: Object.freeze([""]) }],
  },
  "non-ASCII, a lone surrogate and long strings": {
    ...base,
    reason: `Ärzte 😀 \ud800 ${"x".repeat(300)}`,
    matchedRules: Object.freeze(["règle", "x".repeat(20_000)]),
    decisionId: `id-${"é".repeat(100)}-\udc00`,
    impliedTraits: [{ trait: "role:médecin", via: Object.freeze(["role:ärztin", "😀"]) }],
  },
  "a decision id of 127 bytes": {
    ...base,
    decisionId: "d".repeat(127),
    impliedTraits: [{ trait: "role:staff", via }],
  },
  "a decision id of 128 bytes": { ...base, decisionId: "d".repeat(128) },
};
