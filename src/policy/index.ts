/**
 * The policy engine as a library: trait registry, policy validation and
 * compilation, evaluation, explanation and sanitization. No transport types.
 */
export { builtinTraits } from "./builtin-traits.js";
export { decisionStrength, PolicyValidationError } from "./compile.js";
export { defaultPolicy } from "./default-policy.js";
export { compilePolicy, type PolicyEngine } from "./engine.js";
export type { Explanation, RuleTrace, TraitDerivation } from "./explain.js";
export { luhnValid, type PatternName, patternNames, redactText } from "./redact.js";
export {
  createTraitRegistry,
  loadTraitRegistry,
  type TraitDefinition,
  type TraitRegistry,
} from "./registry.js";
export {
  maskValue,
  planSanitize,
  type Removal,
  type SanitizePlan,
  type SanitizeResult,
  sanitizeDocument,
} from "./sanitize.js";
export { parseTrait, type TraitCategory, traitCategories } from "./trait-syntax.js";
export type * from "./types.js";
export { type PolicyIssue, validatePolicy } from "./validate.js";
