import { hasBit, intersects, orInto } from "./bitset.js";
import type { TraitRegistry } from "./registry.js";
import type { PolicyDocument, PolicyRule } from "./types.js";
import type { PolicyIssue } from "./validate.js";

/**
 * Rules that can never decide anything, found with the registry's closures:
 * - RULE_NEVER_MATCHES: what `all` implies includes a `none` trait, every `any`
 *   trait implies a `none` trait, or what `all` implies holds conflicting
 *   traits (such a request is denied before rules are looked at);
 * - RULE_SHADOWED: a stronger rule without a condition matches whenever this
 *   one does, in all of its contexts (deny beats sanitize beats allow).
 * Sound but not complete: a rule reported is dead; a dead rule may be missed
 * (e.g. one whose condition is always false).
 */
const strength = { allow: 0, sanitize: 1, deny: 2 } as const;

interface Facts {
  rule: PolicyRule;
  at: number;
  /** The traits every matching request holds: the closure of `all`. */
  allClosure: Uint32Array;
  any: number[];
  none: number[];
}

export function analyzeRules(doc: PolicyDocument, registry: TraitRegistry): PolicyIssue[] {
  const { words, closures, conflictClosures } = registry;
  const ids = (names: readonly string[] | undefined) => (names ?? []).map((n) => registry.idOf(n)!);
  const closureHas = (trait: number, other: number) => hasBit(closures, trait * words, other);
  const issues: PolicyIssue[] = [];
  const facts: Facts[] = [];
  doc.rules.forEach((rule, at) => {
    const allClosure = new Uint32Array(words);
    const conflicts = new Uint32Array(words);
    for (const id of ids(rule.when.all)) {
      orInto(allClosure, 0, closures, id * words, words);
      orInto(conflicts, 0, conflictClosures, id * words, words);
    }
    const any = ids(rule.when.any);
    const none = ids(rule.when.none);
    const never = (message: string) =>
      issues.push({
        reason: "RULE_NEVER_MATCHES",
        field: `rules[${at}].when`,
        ruleId: rule.id,
        message: `rule ${rule.id} can never match: ${message}`,
      });
    const excluded = none.find((n) => hasBit(allClosure, 0, n));
    if (excluded !== undefined) {
      never(`its required traits imply ${registry.names[excluded]}, which it excludes`);
    } else if (any.length > 0 && any.every((x) => none.some((n) => closureHas(x, n)))) {
      never("every trait of any implies a trait it excludes");
    } else if (intersects(allClosure, 0, conflicts, 0, words)) {
      never("its required traits conflict with each other");
    } else {
      facts.push({ rule, at, allClosure, any, none });
    }
  });
  for (const a of facts) {
    const shadow = facts.find(
      (b) =>
        b !== a &&
        strength[b.rule.decision] > strength[a.rule.decision] &&
        b.rule.condition === undefined &&
        coversContexts(b.rule.contexts, a.rule.contexts) &&
        implies(a, b, registry),
    );
    if (shadow) {
      issues.push({
        reason: "RULE_SHADOWED",
        field: `rules[${a.at}]`,
        ruleId: a.rule.id,
        message: `rule ${a.rule.id} (${a.rule.decision}) never decides: rule ${shadow.rule.id} (${shadow.rule.decision}) matches whenever it does`,
      });
    }
  }
  return issues;
}

function coversContexts(broad: readonly string[], narrow: readonly string[]): boolean {
  if (broad.includes("*")) return true;
  return !narrow.includes("*") && narrow.every((c) => broad.includes(c));
}

/** Whether every request matching `a` (ignoring its condition) also matches `b`. */
function implies(a: Facts, b: Facts, registry: TraitRegistry): boolean {
  const { words, closures } = registry;
  const bAll = (b.rule.when.all ?? []).map((n) => registry.idOf(n)!);
  if (!bAll.every((t) => hasBit(a.allClosure, 0, t))) return false;
  if (b.any.length > 0) {
    const anyGuaranteed =
      b.any.some((t) => hasBit(a.allClosure, 0, t)) ||
      (a.any.length > 0 && a.any.every((x) => b.any.some((t) => hasBit(closures, x * words, t))));
    if (!anyGuaranteed) return false;
  }
  return b.none.every((m) => a.none.some((n) => hasBit(closures, m * words, n)));
}
