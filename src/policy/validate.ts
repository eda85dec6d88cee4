import { analyzeRules } from "./analyze.js";
import { compileCondition } from "./condition.js";
import { patternNames } from "./redact.js";
import type { TraitRegistry } from "./registry.js";
import { unknownTraitError } from "./trait-syntax.js";
import type { PolicyDocument } from "./types.js";

/**
 * The policy validator behind validate/dry-run: every problem at once, each
 * with the rule id and the field (`rules[3].when.all[1]`) it is about.
 */
export interface PolicyIssue {
  reason: string;
  field: string;
  ruleId?: string;
  message: string;
}

/** The most rules an analysed (API-submitted) policy may have, and the longest CEL condition. */
export const maxRules = 5000;
export const maxConditionChars = 2000;

export const ruleIdPattern = /^[a-z0-9][a-z0-9_.-]{0,127}$/;
export const contextPattern = /^([A-Z][A-Z0-9_]{0,63}|\*)$/;
const fieldPathPattern = /^([A-Za-z0-9_$-]+|\*)(\.([A-Za-z0-9_$-]+|\*))*$/;
const decisions = new Set(["allow", "deny", "sanitize"]);
const ruleKeys = new Set([
  "id",
  "description",
  "contexts",
  "when",
  "decision",
  "sanitize",
  "condition",
]);
const whenKeys = ["all", "any", "none"] as const;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Checks a policy document against a registry. With `analyze` (the default)
 * a structurally valid document is also checked for rules that can never
 * match and rules shadowed by a stronger rule (see analyze.ts).
 */
export function validatePolicy(
  doc: unknown,
  registry: TraitRegistry,
  options: { analyze?: boolean } = {},
): PolicyIssue[] {
  const issues: PolicyIssue[] = [];
  const add = (reason: string, field: string, message: string, ruleId?: string) =>
    issues.push(
      ruleId === undefined ? { reason, field, message } : { reason, field, message, ruleId },
    );
  if (!isObject(doc)) {
    add("POLICY_MALFORMED", "", "a policy is a JSON object with a rules array");
    return issues;
  }
  for (const key of Object.keys(doc)) {
    if (key !== "rules" && key !== "sanitization")
      add("UNKNOWN_FIELD", key, `unknown field "${key}"`);
  }
  const classes = new Set(
    registry.inCategory("data_access").map((n) => n.slice("data_access:".length)),
  );
  validateSanitization(doc.sanitization, classes, add);
  if (!Array.isArray(doc.rules)) {
    add("POLICY_MALFORMED", "rules", "rules must be an array");
    return issues;
  }
  // Bounded when analysed (policies arriving through the API): the analysis compares rules
  // pairwise. Compiling alone (the library, its benchmark) is linear and takes any size.
  if (options.analyze !== false && doc.rules.length > maxRules) {
    add("POLICY_TOO_LARGE", "rules", `a policy has at most ${maxRules} rules`);
    return issues;
  }
  const seen = new Set<string>();
  doc.rules.forEach((rule: unknown, i: number) => {
    const at = `rules[${i}]`;
    if (!isObject(rule)) {
      add("RULE_MALFORMED", at, `${at} must be an object`);
      return;
    }
    const id = typeof rule.id === "string" ? rule.id : undefined;
    const r = (reason: string, field: string, message: string) =>
      add(reason, `${at}.${field}`, `rule ${id ?? i}: ${message}`, id);
    for (const key of Object.keys(rule)) {
      if (!ruleKeys.has(key)) r("UNKNOWN_FIELD", key, `unknown field "${key}"`);
    }
    if (id === undefined || !ruleIdPattern.test(id)) {
      r("RULE_ID_INVALID", "id", "id must match [a-z0-9][a-z0-9_.-]*");
    } else if (seen.has(id)) {
      r("RULE_ID_DUPLICATE", "id", `id "${id}" is used twice`);
    } else {
      seen.add(id);
    }
    if (typeof rule.description !== "string" || rule.description.trim() === "") {
      r("RULE_DESCRIPTION_MISSING", "description", "description must be a non-empty string");
    }
    if (!Array.isArray(rule.contexts) || rule.contexts.length === 0) {
      r("RULE_CONTEXTS_INVALID", "contexts", "contexts must be a non-empty array");
    } else {
      rule.contexts.forEach((c: unknown, j: number) => {
        if (typeof c !== "string" || !contextPattern.test(c)) {
          r(
            "RULE_CONTEXT_INVALID",
            `contexts[${j}]`,
            `context ${JSON.stringify(c)} is not UPPER_SNAKE_CASE or *`,
          );
        }
      });
    }
    if (!isObject(rule.when)) {
      r("RULE_WHEN_INVALID", "when", "when must be an object with all, any and/or none");
    } else {
      for (const key of Object.keys(rule.when)) {
        if (!(whenKeys as readonly string[]).includes(key))
          r("UNKNOWN_FIELD", `when.${key}`, `unknown field "when.${key}"`);
      }
      for (const key of whenKeys) {
        const list = rule.when[key];
        if (list === undefined) continue;
        if (!Array.isArray(list)) {
          r("RULE_WHEN_INVALID", `when.${key}`, `when.${key} must be an array of traits`);
          continue;
        }
        list.forEach((trait: unknown, j: number) => {
          const field = `${at}.when.${key}[${j}]`;
          if (typeof trait === "string" && registry.idOf(trait) !== undefined) return;
          const error = unknownTraitError(trait, field);
          add(error.reason, field, `rule ${id ?? i}: ${error.message}`, id);
        });
      }
    }
    if (typeof rule.decision !== "string" || !decisions.has(rule.decision)) {
      r("RULE_DECISION_INVALID", "decision", "decision must be allow, deny or sanitize");
    }
    if (rule.decision === "sanitize") {
      validateSpec(rule.sanitize, classes, r);
    } else if (rule.sanitize !== undefined) {
      r("RULE_SANITIZE_UNEXPECTED", "sanitize", "sanitize is only allowed with decision sanitize");
    }
    if (rule.condition !== undefined) {
      if (typeof rule.condition !== "string" || rule.condition.trim() === "") {
        r("RULE_CONDITION_INVALID", "condition", "condition must be a CEL expression");
      } else if (rule.condition.length > maxConditionChars) {
        r(
          "RULE_CONDITION_INVALID",
          "condition",
          `condition is longer than ${maxConditionChars} characters`,
        );
      } else {
        try {
          compileCondition(rule.condition);
        } catch (err) {
          r(
            "RULE_CONDITION_INVALID",
            "condition",
            `condition is not valid CEL: ${(err as Error).message}`,
          );
        }
      }
    }
  });
  if (issues.length === 0 && options.analyze !== false) {
    issues.push(...analyzeRules(doc as unknown as PolicyDocument, registry));
  }
  return issues;
}

function validateSpec(
  spec: unknown,
  classes: ReadonlySet<string>,
  r: (reason: string, field: string, message: string) => void,
): void {
  if (!isObject(spec)) {
    r(
      "RULE_SANITIZE_MISSING",
      "sanitize",
      "decision sanitize needs sanitize {fields, classifications}",
    );
    return;
  }
  for (const key of Object.keys(spec)) {
    if (key !== "fields" && key !== "classifications")
      r("UNKNOWN_FIELD", `sanitize.${key}`, `unknown field "sanitize.${key}"`);
  }
  const fields = spec.fields ?? [];
  const classifications = spec.classifications ?? [];
  if (!Array.isArray(fields))
    r("RULE_SANITIZE_INVALID", "sanitize.fields", "fields must be an array");
  else
    fields.forEach((f: unknown, j: number) => {
      if (typeof f !== "string" || !fieldPathPattern.test(f)) {
        r(
          "RULE_SANITIZE_INVALID",
          `sanitize.fields[${j}]`,
          `field path ${JSON.stringify(f)} is not a dotted path`,
        );
      }
    });
  if (!Array.isArray(classifications))
    r("RULE_SANITIZE_INVALID", "sanitize.classifications", "classifications must be an array");
  else
    classifications.forEach((c: unknown, j: number) => {
      if (typeof c !== "string" || !classes.has(c)) {
        r(
          "RULE_SANITIZE_INVALID",
          `sanitize.classifications[${j}]`,
          `${JSON.stringify(c)} is not a registered data class (data_access:<class>)`,
        );
      }
    });
  if (
    Array.isArray(fields) &&
    Array.isArray(classifications) &&
    fields.length + classifications.length === 0
  ) {
    r("RULE_SANITIZE_MISSING", "sanitize", "sanitize names no field and no classification");
  }
}

function validateSanitization(
  value: unknown,
  classes: ReadonlySet<string>,
  add: (reason: string, field: string, message: string) => void,
): void {
  if (value === undefined) return;
  if (!isObject(value)) {
    add(
      "SANITIZATION_INVALID",
      "sanitization",
      "sanitization must be an object keyed by data class",
    );
    return;
  }
  for (const [name, entry] of Object.entries(value)) {
    const at = `sanitization.${name}`;
    if (!classes.has(name))
      add("SANITIZATION_INVALID", at, `"${name}" is not a registered data class`);
    if (!isObject(entry)) {
      add("SANITIZATION_INVALID", at, `${at} must be {fields, patterns?, action?}`);
      continue;
    }
    for (const key of Object.keys(entry)) {
      if (key !== "fields" && key !== "patterns" && key !== "action")
        add("UNKNOWN_FIELD", `${at}.${key}`, `unknown field "${key}"`);
    }
    if (!Array.isArray(entry.fields))
      add("SANITIZATION_INVALID", `${at}.fields`, "fields must be an array");
    else
      entry.fields.forEach((f: unknown, j: number) => {
        if (typeof f !== "string" || !fieldPathPattern.test(f))
          add(
            "SANITIZATION_INVALID",
            `${at}.fields[${j}]`,
            `field path ${JSON.stringify(f)} is not a dotted path`,
          );
      });
    if (entry.patterns !== undefined && !Array.isArray(entry.patterns))
      add("SANITIZATION_INVALID", `${at}.patterns`, "patterns must be an array");
    else
      (entry.patterns as unknown[] | undefined)?.forEach((p: unknown, j: number) => {
        if (typeof p !== "string" || !(patternNames as readonly string[]).includes(p))
          add(
            "SANITIZATION_INVALID",
            `${at}.patterns[${j}]`,
            `unknown pattern ${JSON.stringify(p)} (one of ${patternNames.join(", ")})`,
          );
      });
    if (entry.action !== undefined && entry.action !== "remove" && entry.action !== "mask")
      add("SANITIZATION_INVALID", `${at}.action`, "action must be remove or mask");
  }
}
