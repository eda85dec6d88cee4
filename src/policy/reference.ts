import { isCelError, run } from "@bufbuild/cel";
import type { TraitDefinition } from "./registry.js";
import type {
  DecisionReasonCode,
  EvaluationRequest,
  PolicyDecision,
  PolicyDocument,
} from "./types.js";

/**
 * The rule semantics written as plainly as possible: no interning, no index,
 * every rule scanned, CEL parsed on every call. It is the oracle the compiled
 * engine is checked against (property tests, and every engine of the
 * benchmark before it is timed). Assumes valid input.
 */
export interface ReferenceDecision {
  decision: PolicyDecision;
  reasonCode: DecisionReasonCode;
  matchedRules: string[];
}

export function referenceEvaluate(
  definitions: readonly TraitDefinition[],
  doc: PolicyDocument,
  request: EvaluationRequest,
): ReferenceDecision {
  const byName = new Map(definitions.map((d) => [d.name, d]));
  const held = new Set<string>();
  const addWithImplied = (name: string) => {
    if (held.has(name)) return;
    held.add(name);
    for (const implied of byName.get(name)?.implies ?? []) addWithImplied(implied);
  };
  for (const trait of request.traits) addWithImplied(trait);
  for (const c of request.classifications ?? []) addWithImplied(`data_access:${c}`);
  for (const name of held) {
    for (const other of byName.get(name)?.conflicts ?? []) {
      if (held.has(other))
        return { decision: "deny", reasonCode: "TRAIT_CONFLICT", matchedRules: [] };
    }
  }
  const matched: string[] = [];
  let failed = false;
  let best: PolicyDecision | undefined;
  const rank = { allow: 0, sanitize: 1, deny: 2 };
  for (const rule of doc.rules) {
    if (!rule.contexts.includes("*") && !rule.contexts.includes(request.context)) continue;
    const { all = [], any = [], none = [] } = rule.when;
    if (!all.every((t) => held.has(t))) continue;
    if (any.length > 0 && !any.some((t) => held.has(t))) continue;
    if (none.some((t) => held.has(t))) continue;
    if (rule.condition !== undefined) {
      const result = run(rule.condition, {
        request: {
          user_id: request.userId ?? "",
          context: request.context,
          traits: [...held].sort(),
          classifications: [...(request.classifications ?? [])],
          resource: (request.resource ?? {}) as Record<string, never>,
        },
      });
      if (isCelError(result) || typeof result !== "boolean") {
        failed = true;
        continue;
      }
      if (!result) continue;
    }
    matched.push(rule.id);
    if (best === undefined || rank[rule.decision] > rank[best]) best = rule.decision;
  }
  if (failed) return { decision: "deny", reasonCode: "EVALUATION_ERROR", matchedRules: matched };
  if (best === undefined) return { decision: "deny", reasonCode: "NO_MATCH", matchedRules: [] };
  const reasonCode =
    best === "allow" ? "RULE_ALLOW" : best === "sanitize" ? "RULE_SANITIZE" : "RULE_DENY";
  return { decision: best, reasonCode, matchedRules: matched };
}
