import { createHash } from "node:crypto";
import { canonicalJson } from "../audit/canonical.js";
import type { JsonValue } from "../audit/details.js";
import { DomainError } from "../errors.js";
import { bitsOf } from "./bitset.js";
import { type CompiledCondition, compileCondition } from "./condition.js";
import type { TraitRegistry } from "./registry.js";
import type { PolicyDecision, PolicyDocument, PolicyRule, SanitizeSpec } from "./types.js";
import { type PolicyIssue, validatePolicy } from "./validate.js";

/** A policy that failed validation: every issue, the first one in the message. */
export class PolicyValidationError extends DomainError {
  constructor(readonly issues: readonly PolicyIssue[]) {
    const first = issues[0]!;
    super(
      "invalid_argument",
      first.reason,
      `${first.message}${issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""}`,
      {
        field: first.field,
        metadata: first.ruleId === undefined ? {} : { rule_id: first.ruleId },
      },
    );
  }
}

export const decisionStrength: Readonly<Record<PolicyDecision, number>> = {
  allow: 0,
  sanitize: 1,
  deny: 2,
};

/**
 * Rules of one context, indexed by two of their required traits. Trait `t`
 * owns the entries `start[t]` to `start[t + 1]`; entry `e` holds the rules
 * `rules[ruleStart[e]]` to `rules[ruleStart[e + 1]]` that need `t` and, unless
 * `partner[e]` is -1, also trait `partner[e]`. A decision visits an entry
 * only when the caller holds both. `always` holds rules with no required trait.
 */
export interface ContextIndex {
  start: Int32Array;
  partner: Int32Array;
  ruleStart: Int32Array;
  rules: Int32Array;
  always: Int32Array;
}

/** A rule's index keys: its anchor and partner (-1: none), or none at all. */
type Keys = readonly [number, number] | undefined;

/** A policy version compiled once: plain typed arrays the evaluator walks. */
export interface CompiledRules {
  version: string;
  document: PolicyDocument;
  registry: TraitRegistry;
  ids: readonly string[];
  /** 0 allow, 1 sanitize, 2 deny. */
  strength: Uint8Array;
  /** Rule r's traits: all in [allFrom[r], anyFrom[r]), any up to noneFrom[r], none up to end[r]. */
  traits: Int32Array;
  allFrom: Int32Array;
  anyFrom: Int32Array;
  noneFrom: Int32Array;
  end: Int32Array;
  conditions: readonly (CompiledCondition | undefined)[];
  sanitize: readonly (SanitizeSpec | undefined)[];
  contexts: ReadonlyMap<string, ContextIndex>;
  /** For a context no rule names: the rules of context `*`. */
  wildcard: ContextIndex;
  /** data class name (`pii`) → trait id of `data_access:pii`. */
  dataClasses: ReadonlyMap<string, number>;
}

/** Validates (structure, traits, CEL) and compiles a policy against a registry. */
export function compileRules(doc: PolicyDocument, registry: TraitRegistry): CompiledRules {
  const issues = validatePolicy(doc, registry, { analyze: false });
  if (issues.length > 0) throw new PolicyValidationError(issues);
  const rules = doc.rules;
  const n = rules.length;
  const idOf = (name: string) => registry.idOf(name)!;
  const allFrom = new Int32Array(n);
  const anyFrom = new Int32Array(n);
  const noneFrom = new Int32Array(n);
  const end = new Int32Array(n);
  const flat: number[] = [];
  rules.forEach((rule, r) => {
    allFrom[r] = flat.length;
    flat.push(...(rule.when.all ?? []).map(idOf));
    anyFrom[r] = flat.length;
    flat.push(...(rule.when.any ?? []).map(idOf));
    noneFrom[r] = flat.length;
    flat.push(...(rule.when.none ?? []).map(idOf));
    end[r] = flat.length;
  });
  const traits = Int32Array.from(flat);

  const contextNames = new Set(rules.flatMap((rule) => rule.contexts).filter((c) => c !== "*"));
  const keysOf = keyChooser(rules, registry);
  const build = (context: string | undefined) =>
    buildIndex(
      rules,
      (rule) =>
        rule.contexts.includes("*") || (context !== undefined && rule.contexts.includes(context)),
      registry,
      keysOf,
    );
  const contexts = new Map<string, ContextIndex>();
  for (const context of contextNames) contexts.set(context, build(context));

  const prefix = "data_access:";
  const dataClasses = new Map<string, number>();
  for (const name of registry.inCategory("data_access")) {
    dataClasses.set(name.slice(prefix.length), idOf(name));
  }
  return {
    version: createHash("sha256")
      .update(canonicalJson(doc as unknown as JsonValue))
      .digest("hex"),
    document: doc,
    registry,
    ids: rules.map((rule) => rule.id),
    strength: Uint8Array.from(rules, (rule) => decisionStrength[rule.decision]),
    traits,
    allFrom,
    anyFrom,
    noneFrom,
    end,
    conditions: rules.map((rule) =>
      rule.condition === undefined ? undefined : compileCondition(rule.condition),
    ),
    sanitize: rules.map((rule) =>
      rule.decision === "sanitize"
        ? Object.freeze({
            fields: Object.freeze([...(rule.sanitize?.fields ?? [])]),
            classifications: Object.freeze([...(rule.sanitize?.classifications ?? [])]),
          })
        : undefined,
    ),
    contexts,
    wildcard: build(undefined),
    dataClasses,
  };
}

/**
 * The index keys of a rule with required traits: the two whose buckets the
 * fewest decisions visit, estimated as (how many traits imply it) × (how many
 * rules require it), so that a common capability does not collect every rule.
 */
function keyChooser(rules: readonly PolicyRule[], registry: TraitRegistry) {
  const { words, closures, names } = registry;
  const impliedBy = new Int32Array(names.length);
  for (let id = 0; id < names.length; id++) {
    for (const member of bitsOf(closures, id * words, words)) impliedBy[member]!++;
  }
  const required = rules.map((rule) => [
    ...new Set((rule.when.all ?? []).map((name) => registry.idOf(name)!)),
  ]);
  const requiredBy = new Int32Array(names.length);
  for (const all of required) for (const id of all) requiredBy[id]!++;
  const cost = (id: number) => impliedBy[id]! * requiredBy[id]!;
  const keys = required.map((all): Keys => {
    if (all.length === 0) return undefined;
    const sorted = [...all].sort((x, y) => cost(x) - cost(y) || x - y);
    return [sorted[0]!, sorted[1] ?? -1];
  });
  return (r: number) => keys[r];
}

function buildIndex(
  rules: readonly PolicyRule[],
  applies: (rule: PolicyRule) => boolean,
  registry: TraitRegistry,
  keysOf: (r: number) => Keys,
): ContextIndex {
  // anchor → partner → rules
  const buckets: Map<number, number[]>[] = Array.from(
    { length: registry.names.length },
    () => new Map(),
  );
  const put = (anchor: number, partner: number, r: number) => {
    const bucket = buckets[anchor]!;
    const list = bucket.get(partner);
    if (list) list.push(r);
    else bucket.set(partner, [r]);
  };
  const always: number[] = [];
  rules.forEach((rule, r) => {
    if (!applies(rule)) return;
    const keys = keysOf(r);
    const any = rule.when.any ?? [];
    if (keys !== undefined) put(keys[0], keys[1], r);
    else if (any.length === 0) always.push(r);
    // No required trait: the rule waits under each of its `any` traits.
    else for (const name of new Set(any)) put(registry.idOf(name)!, -1, r);
  });
  const start = new Int32Array(buckets.length + 1);
  const partner: number[] = [];
  const ruleStart: number[] = [];
  const flat: number[] = [];
  buckets.forEach((bucket, t) => {
    for (const [p, list] of [...bucket].sort((x, y) => x[0] - y[0])) {
      partner.push(p);
      ruleStart.push(flat.length);
      flat.push(...list);
    }
    start[t + 1] = partner.length;
  });
  ruleStart.push(flat.length);
  return {
    start,
    partner: Int32Array.from(partner),
    ruleStart: Int32Array.from(ruleStart),
    rules: Int32Array.from(flat),
    always: Int32Array.from(always),
  };
}
