import { DomainError, invalidArgument } from "../errors.js";
import { type CompiledRules, compileRules } from "./compile.js";
import type { ConditionInput } from "./condition.js";
import { type Explanation, explainDecision } from "./explain.js";
import {
  conditionInput,
  conflictDecision,
  errorDecision,
  mergeSanitize,
  noStrings,
  ruleIds,
} from "./outcomes.js";
import type { TraitRegistry } from "./registry.js";
import {
  planSanitize,
  type SanitizePlan,
  type SanitizeResult,
  sanitizeDocument,
} from "./sanitize.js";
import { unknownTraitError } from "./trait-syntax.js";
import type {
  Decision,
  EvaluationRequest,
  PolicyDecision,
  PolicyDocument,
  RuleError,
  SanitizeSpec,
} from "./types.js";

/** A compiled policy version: the library's entry point, free of transport types. */
export interface PolicyEngine {
  readonly version: string;
  readonly registry: TraitRegistry;
  readonly document: PolicyDocument;
  /** One decision. Throws invalid_argument for a malformed, unknown or unregistered trait. */
  evaluate(request: EvaluationRequest): Decision;
  evaluateBatch(requests: readonly EvaluationRequest[]): Decision[];
  /** The decision with, for every rule, why it matched or not, and how implied traits came. */
  explain(request: EvaluationRequest): Explanation;
  /** The `ui_feature:` traits these traits may see (a decision other than deny in `context`). */
  uiFeatures(traits: readonly string[], context?: string): string[];
  /** A copy of `document` without what `spec` (a sanitize decision's) takes out. */
  sanitize(document: unknown, spec: SanitizeSpec): SanitizeResult;
}

const decisionNames: readonly PolicyDecision[] = ["allow", "sanitize", "deny"];
const reasonCodes = ["RULE_ALLOW", "RULE_SANITIZE", "RULE_DENY"] as const;

/** Validates and compiles a policy document once; evaluations then touch only typed arrays. */
export function compilePolicy(doc: PolicyDocument, registry: TraitRegistry): PolicyEngine {
  const c = compileRules(doc, registry);
  const evaluate = createEvaluator(c);
  const uiFeatureNames = registry.inCategory("ui_feature");
  const plans = new Map<string, SanitizePlan>();
  const planFor = (spec: SanitizeSpec): SanitizePlan => {
    const key = `${[...spec.classifications].sort().join(",")}|${[...spec.fields].sort().join(",")}`;
    let plan = plans.get(key);
    if (plan === undefined) {
      if (plans.size >= 1024) plans.clear();
      plan = planSanitize(spec, doc.sanitization);
      plans.set(key, plan);
    }
    return plan;
  };
  const engine: PolicyEngine = {
    version: c.version,
    registry,
    document: doc,
    evaluate,
    evaluateBatch: (requests) =>
      requests.map((request, i) => {
        try {
          return evaluate(request);
        } catch (err) {
          throw err instanceof DomainError && err.field !== undefined
            ? new DomainError(err.kind, err.reason, `requests[${i}].${err.message}`, {
                cause: err,
                field: `requests[${i}].${err.field}`,
                metadata: err.metadata,
              })
            : err;
        }
      }),
    explain: (request) => explainDecision(c, request, evaluate(request)),
    uiFeatures: (traits, context = "UI_RENDER") =>
      uiFeatureNames.filter(
        (feature) => evaluate({ traits: [...traits, feature], context }).decision !== "deny",
      ),
    sanitize: (document, spec) => sanitizeDocument(document, planFor(spec)),
  };
  return engine;
}

/**
 * The hot path. Per decision: one Map lookup per given trait, OR of its
 * precomputed closure row into a scratch bit set, a conflict test, then only
 * the index buckets of traits the caller holds. Scratch arrays are reused
 * (evaluation is synchronous and never re-entered).
 */
function createEvaluator(c: CompiledRules): (request: EvaluationRequest) => Decision {
  const { registry, traits, allFrom, anyFrom, noneFrom, end, strength, conditions, ids } = c;
  const { words, closures, conflictClosures } = registry;
  const version = c.version;
  const held = new Uint32Array(words);
  const conflicting = new Uint32Array(words);
  const seen = new Uint32Array(ids.length);
  const matched = new Int32Array(ids.length);
  // State of the decision in progress (evaluation is synchronous, never re-entered).
  let epoch = 0;
  let count = 0;
  let current: EvaluationRequest | undefined;
  let input: ConditionInput | undefined;
  let errors: RuleError[] | undefined;
  const has = (t: number) => ((held[t >>> 5]! >>> (t & 31)) & 1) === 1;
  // The answer when exactly one rule matched is fixed: built once per rule.
  const alone: readonly Decision[] = ids.map((id, r) =>
    Object.freeze({
      decision: decisionNames[strength[r]!]!,
      reasonCode: reasonCodes[strength[r]!]!,
      reason: `${decisionNames[strength[r]!]} by rule ${id}`,
      decidingRule: id,
      matchedRules: Object.freeze([id]),
      sanitize: c.sanitize[r],
      errors: undefined,
      policyVersion: version,
    }),
  );
  const noMatch: Decision = Object.freeze({
    decision: "deny",
    reasonCode: "NO_MATCH",
    reason: "no rule matched (default deny)",
    decidingRule: undefined,
    matchedRules: noStrings,
    sanitize: undefined,
    errors: undefined,
    policyVersion: version,
  });

  // Answers for two or more matched rules, frozen, by the rules' indexes ("3,17").
  const combinations = new Map<string, Decision>();

  // Registries without any conflict skip that bookkeeping.
  const anyConflicts = conflictClosures.some((w) => w !== 0);
  const addTrait = (id: number) => {
    const row = id * words;
    for (let w = 0; w < words; w++) held[w]! |= closures[row + w]!;
    if (anyConflicts) for (let w = 0; w < words; w++) conflicting[w]! |= conflictClosures[row + w]!;
  };

  const consider = (r: number) => {
    if (seen[r] === epoch) return;
    seen[r] = epoch;
    const allEnd = anyFrom[r]!;
    for (let k = allFrom[r]!; k < allEnd; k++) if (!has(traits[k]!)) return;
    const anyEnd = noneFrom[r]!;
    if (anyEnd > allEnd) {
      let k = allEnd;
      while (k < anyEnd && !has(traits[k]!)) k++;
      if (k === anyEnd) return;
    }
    const stop = end[r]!;
    for (let k = anyEnd; k < stop; k++) if (has(traits[k]!)) return;
    const condition = conditions[r];
    if (condition !== undefined) {
      input ??= conditionInput(c, current!, held);
      const result = condition(input);
      if (result === false) return;
      if (result !== true) {
        errors ??= [];
        errors.push({ ruleId: ids[r]!, message: result.error });
        return;
      }
    }
    matched[count++] = r;
  };

  return (request) => {
    const index = c.contexts.get(request.context) ?? c.wildcard;
    for (let w = 0; w < words; w++) {
      held[w] = 0;
      conflicting[w] = 0;
    }
    const given = request.traits;
    for (let i = 0; i < given.length; i++) {
      const id = registry.idOf(given[i]!);
      if (id === undefined) throw unknownTraitError(given[i], `traits[${i}]`);
      addTrait(id);
    }
    const classes = request.classifications;
    if (classes !== undefined) {
      for (let i = 0; i < classes.length; i++) {
        const id = c.dataClasses.get(classes[i]!);
        if (id === undefined) {
          throw invalidArgument(
            "CLASSIFICATION_UNKNOWN",
            `classifications[${i}]: "${classes[i]}" is not a registered data class`,
            { field: `classifications[${i}]`, metadata: { classification: String(classes[i]) } },
          );
        }
        addTrait(id);
      }
    }
    if (anyConflicts) {
      for (let w = 0; w < words; w++) {
        if ((held[w]! & conflicting[w]!) !== 0) return conflictDecision(c, held);
      }
    }

    if (++epoch === 0xffffffff) {
      seen.fill(0);
      epoch = 1;
    }
    count = 0;
    current = request;
    input = undefined;
    errors = undefined;
    const { start, partner, ruleStart, rules, always } = index;
    for (let w = 0; w < words; w++) {
      let bits = held[w]!;
      while (bits !== 0) {
        const low = bits & -bits;
        bits ^= low;
        const t = (w << 5) + 31 - Math.clz32(low);
        for (let e = start[t]!, stop = start[t + 1]!; e < stop; e++) {
          const p = partner[e]!;
          if (p !== -1 && !has(p)) continue;
          for (let k = ruleStart[e]!, to = ruleStart[e + 1]!; k < to; k++) consider(rules[k]!);
        }
      }
    }
    for (let k = 0; k < always.length; k++) consider(always[k]!);
    current = undefined;
    input = undefined;

    if (errors !== undefined) return errorDecision(c, matched, count, errors);
    if (count === 0) return noMatch;
    if (count === 1) return alone[matched[0]!]!;
    // Policy order (rule index): insertion sort, the list is short.
    for (let i = 1; i < count; i++) {
      const r = matched[i]!;
      let j = i - 1;
      while (j >= 0 && matched[j]! > r) {
        matched[j + 1] = matched[j]!;
        j--;
      }
      matched[j + 1] = r;
    }
    let deciding = matched[0]!;
    for (let i = 1; i < count; i++) {
      if (strength[matched[i]!]! > strength[deciding]!) deciding = matched[i]!;
    }
    // Without errors, the answer follows from the matched rules alone: built once per set.
    let key = String(matched[0]);
    for (let i = 1; i < count; i++) key += `,${matched[i]}`;
    let combined = combinations.get(key);
    if (combined === undefined) {
      const decided = alone[deciding]!;
      const sanitize = strength[deciding] === 1 ? mergeSanitize(c, matched, count) : undefined;
      combined = Object.freeze({
        decision: decided.decision,
        reasonCode: decided.reasonCode,
        reason: decided.reason,
        decidingRule: decided.decidingRule,
        matchedRules: Object.freeze(ruleIds(ids, matched, count)),
        sanitize:
          sanitize === undefined
            ? undefined
            : Object.freeze({
                fields: Object.freeze([...sanitize.fields]),
                classifications: Object.freeze([...sanitize.classifications]),
              }),
        errors: undefined,
        policyVersion: version,
      });
      if (combinations.size >= maxCombinations) combinations.clear();
      combinations.set(key, combined);
    }
    return combined;
  };
}

/** Answers kept for sets of matched rules (each a few hundred bytes); cleared when full. */
const maxCombinations = 4096;
