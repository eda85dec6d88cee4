import { bitsOf, hasBit, setBit } from "./bitset.js";
import type { CompiledRules } from "./compile.js";
import type { Decision, EvaluationRequest, PolicyDecision } from "./types.js";

/** Why one rule matched or not. */
export interface RuleTrace {
  id: string;
  decision: PolicyDecision;
  /** The rule names the request's context (or `*`). */
  inContext: boolean;
  /** The compiled index hands the rule to the evaluator for this request. */
  candidate: boolean;
  /** Required traits the caller does not hold (after implication). */
  missing: string[];
  /** Whether one of `any` is held; undefined when the rule has no `any`. */
  anyHeld: boolean | undefined;
  /** Excluded traits the caller holds. */
  excludedHeld: string[];
  /** The CEL condition's outcome, when the traits matched and the rule has one. */
  condition: "true" | "false" | `error: ${string}` | "not evaluated" | undefined;
  matched: boolean;
}

export interface TraitDerivation {
  trait: string;
  /** From a given trait to this one, through the registry's `implies`. */
  via: readonly string[];
}

export interface Explanation {
  decision: Decision;
  givenTraits: string[];
  /** Traits the caller holds by implication, each with how. */
  impliedTraits: TraitDerivation[];
  rules: RuleTrace[];
}

/**
 * The full trace (not the hot path): every rule is looked at, with the same
 * closures the evaluator used; `decision` is the evaluator's own answer.
 */
export function explainDecision(
  c: CompiledRules,
  request: EvaluationRequest,
  decision: Decision,
): Explanation {
  const { registry } = c;
  const { words, closures, names } = registry;
  const given = [
    ...request.traits.map((t) => registry.idOf(t)!),
    ...(request.classifications ?? []).map((k) => c.dataClasses.get(k)!),
  ];
  const held = new Uint32Array(words);
  const givenSet = new Uint32Array(words);
  for (const id of given) {
    setBit(givenSet, 0, id);
    for (const t of bitsOf(closures, id * words, words)) setBit(held, 0, t);
  }
  const impliedTraits = bitsOf(held, 0, words)
    .filter((t) => !hasBit(givenSet, 0, t))
    .map((t) => {
      const paths = given.map((g) => registry.derivation(g, t)).filter((p) => p !== undefined);
      const shortest = paths.reduce((a, b) => (b.length < a.length ? b : a));
      return { trait: names[t]!, via: shortest.map((id) => names[id]!) };
    });
  const index = c.contexts.get(request.context) ?? c.wildcard;
  const inIndex = new Set<number>(index.always);
  for (const t of bitsOf(held, 0, words)) {
    for (let e = index.start[t]!; e < index.start[t + 1]!; e++) {
      const p = index.partner[e]!;
      if (p !== -1 && !hasBit(held, 0, p)) continue;
      for (let k = index.ruleStart[e]!; k < index.ruleStart[e + 1]!; k++)
        inIndex.add(index.rules[k]!);
    }
  }
  const conflicted = decision.reasonCode === "TRAIT_CONFLICT";
  let input: Parameters<NonNullable<(typeof c.conditions)[number]>>[0] | undefined;
  const rules = c.document.rules.map((rule, r): RuleTrace => {
    const slice = (from: number, to: number) => Array.from(c.traits.subarray(from, to));
    const all = slice(c.allFrom[r]!, c.anyFrom[r]!);
    const any = slice(c.anyFrom[r]!, c.noneFrom[r]!);
    const none = slice(c.noneFrom[r]!, c.end[r]!);
    const missing = all.filter((t) => !hasBit(held, 0, t)).map((t) => names[t]!);
    const anyHeld = any.length === 0 ? undefined : any.some((t) => hasBit(held, 0, t));
    const excludedHeld = none.filter((t) => hasBit(held, 0, t)).map((t) => names[t]!);
    const inContext = rule.contexts.includes("*") || rule.contexts.includes(request.context);
    const traitsMatch =
      inContext && missing.length === 0 && anyHeld !== false && excludedHeld.length === 0;
    let condition: RuleTrace["condition"];
    const compiled = c.conditions[r];
    if (compiled !== undefined) {
      if (!traitsMatch || conflicted) condition = "not evaluated";
      else {
        input ??= {
          user_id: request.userId ?? "",
          context: request.context,
          traits: bitsOf(held, 0, words).map((t) => names[t]!),
          classifications: request.classifications ?? [],
          resource: request.resource ?? {},
        };
        const result = compiled(input);
        condition =
          result === true ? "true" : result === false ? "false" : `error: ${result.error}`;
      }
    }
    return {
      id: rule.id,
      decision: rule.decision,
      inContext,
      candidate: !conflicted && inIndex.has(r),
      missing,
      anyHeld,
      excludedHeld,
      condition,
      matched: !conflicted && traitsMatch && (compiled === undefined || condition === "true"),
    };
  });
  return {
    decision,
    givenTraits: given.map((id) => names[id]!),
    impliedTraits,
    rules,
  };
}
