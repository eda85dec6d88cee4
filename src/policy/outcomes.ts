import { bitsOf } from "./bitset.js";
import type { CompiledRules } from "./compile.js";
import type { ConditionInput } from "./condition.js";
import type { TraitRegistry } from "./registry.js";
import type { Decision, EvaluationRequest, RuleError, SanitizeSpec } from "./types.js";

/** The less common answers of the evaluator, and the helpers it needs for them. */
const noResource: Readonly<Record<string, unknown>> = Object.freeze({});
export const noStrings: readonly string[] = Object.freeze([]);

export function ruleIds(ids: readonly string[], matched: Int32Array, count: number): string[] {
  const out = new Array<string>(count);
  for (let i = 0; i < count; i++) out[i] = ids[matched[i]!]!;
  return out;
}

/** The union of the matched sanitize rules' specs (the rule's own frozen spec when alone). */
export function mergeSanitize(c: CompiledRules, matched: Int32Array, count: number): SanitizeSpec {
  let only: SanitizeSpec | undefined;
  let fields: Set<string> | undefined;
  let classifications: Set<string> | undefined;
  for (let i = 0; i < count; i++) {
    const spec = c.sanitize[matched[i]!];
    if (spec === undefined) continue;
    if (only === undefined) {
      only = spec;
      continue;
    }
    fields ??= new Set(only.fields);
    classifications ??= new Set(only.classifications);
    for (const f of spec.fields) fields.add(f);
    for (const k of spec.classifications) classifications.add(k);
  }
  if (fields === undefined || classifications === undefined) return only!;
  return { fields: [...fields], classifications: [...classifications] };
}

export function conditionInput(
  c: CompiledRules,
  request: EvaluationRequest,
  held: Uint32Array,
): ConditionInput {
  return {
    user_id: request.userId ?? "",
    context: request.context,
    traits: bitsOf(held, 0, c.registry.words).map((t) => c.registry.names[t]!),
    classifications: request.classifications ?? noStrings,
    resource: request.resource ?? noResource,
  };
}

export function errorDecision(
  c: CompiledRules,
  matched: Int32Array,
  count: number,
  errors: RuleError[],
): Decision {
  const first = errors[0]!;
  const sorted = Array.from(matched.subarray(0, count)).sort((a, b) => a - b);
  return {
    decision: "deny",
    reasonCode: "EVALUATION_ERROR",
    reason: `evaluation failed (deny): rule ${first.ruleId}: ${first.message}`,
    decidingRule: first.ruleId,
    matchedRules: sorted.map((r) => c.ids[r]!),
    sanitize: undefined,
    errors,
    policyVersion: c.version,
  };
}

export function conflictDecision(c: CompiledRules, held: Uint32Array): Decision {
  const { registry } = c;
  const names = bitsOf(held, 0, registry.words);
  const pair = findConflict(registry, names);
  return {
    decision: "deny",
    reasonCode: "TRAIT_CONFLICT",
    reason: `traits ${pair[0]} and ${pair[1]} conflict (deny)`,
    decidingRule: undefined,
    matchedRules: noStrings,
    sanitize: undefined,
    errors: undefined,
    policyVersion: c.version,
  };
}

/** Two held traits that conflict: `a` holds `b` in its conflict row, `b` in the held set. */
function findConflict(registry: TraitRegistry, held: readonly number[]): [string, string] {
  const heldSet = new Set(held);
  for (const a of held) {
    const definition = registry.definitions[a]!;
    for (const other of definition.conflicts ?? []) {
      const b = registry.idOf(other)!;
      if (heldSet.has(b)) return [registry.names[a]!, other];
    }
  }
  return ["(implied)", "(implied)"];
}
