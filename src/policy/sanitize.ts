import { type PatternName, redactText } from "./redact.js";
import type { ClassificationSanitizer, SanitizeSpec } from "./types.js";

/**
 * Sanitizing a JSON document for a decision: the fields of the decided
 * classifications (and the rule's own fields) are removed or masked, then the
 * classifications' text patterns are redacted in every remaining string.
 *
 * Field paths: a single name (`ssn`) matches that key at any depth; a dotted
 * path (`patient.contact.email`) is anchored at the root; `*` matches any key;
 * arrays are transparent (`patients.ssn` reaches `patients[3].ssn`).
 */
export type FieldAction = "remove" | "mask";

interface FieldRule {
  segments: readonly string[];
  action: FieldAction;
  classification: string | undefined;
}

export interface SanitizePlan {
  /** Single-name fields, matched at any depth. */
  anywhere: ReadonlyMap<string, FieldRule>;
  anchored: readonly FieldRule[];
  patterns: ReadonlySet<PatternName>;
}

export interface Removal {
  /** Concrete path in the input, e.g. `patients[0].ssn`. */
  path: string;
  kind: "field" | "pattern";
  action: "removed" | "masked" | "redacted";
  classification?: string;
  pattern?: PatternName;
  count?: number;
}

export interface SanitizeResult {
  document: unknown;
  removed: Removal[];
}

export const maskValue = "[REDACTED]";

/** Compiles what a sanitize spec takes out, given the policy's classification field sets. */
export function planSanitize(
  spec: SanitizeSpec,
  sanitization: Readonly<Record<string, ClassificationSanitizer>> = {},
): SanitizePlan {
  const anywhere = new Map<string, FieldRule>();
  const anchored: FieldRule[] = [];
  const patterns = new Set<PatternName>();
  const add = (path: string, action: FieldAction, classification: string | undefined) => {
    const rule = { segments: path.split("."), action, classification };
    if (rule.segments.length > 1) anchored.push(rule);
    else if (anywhere.get(path)?.action !== "remove") anywhere.set(path, rule);
  };
  for (const name of spec.classifications) {
    const entry = sanitization[name];
    if (entry === undefined) continue;
    for (const field of entry.fields) add(field, entry.action ?? "remove", name);
    for (const p of entry.patterns ?? []) patterns.add(p as PatternName);
  }
  for (const field of spec.fields) add(field, "remove", undefined);
  return { anywhere, anchored, patterns };
}

/** A sanitized copy of `document` (the input is not changed) and what was taken out. */
export function sanitizeDocument(document: unknown, plan: SanitizePlan): SanitizeResult {
  const removed: Removal[] = [];
  const roots = plan.anchored.map((rule) => ({ rule, at: 0 }));
  const value = walk(document, "", roots, plan, removed);
  return { document: value, removed };
}

interface Cursor {
  rule: FieldRule;
  /** Index of the next segment to match. */
  at: number;
}

function walk(
  value: unknown,
  path: string,
  cursors: readonly Cursor[],
  plan: SanitizePlan,
  removed: Removal[],
): unknown {
  if (typeof value === "string") {
    if (plan.patterns.size === 0) return value;
    const { text, counts } = redactText(value, plan.patterns);
    if (counts !== undefined) {
      for (const [pattern, count] of Object.entries(counts)) {
        removed.push({
          path: path === "" ? "$" : path,
          kind: "pattern",
          action: "redacted",
          pattern: pattern as PatternName,
          count,
        });
      }
    }
    return text;
  }
  if (Array.isArray(value)) {
    return value.map((item, i) => walk(item, `${path}[${i}]`, cursors, plan, removed));
  }
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    const childPath = path === "" ? key : `${path}.${key}`;
    let hit = plan.anywhere.get(key);
    const next: Cursor[] = [];
    for (const cursor of cursors) {
      const segment = cursor.rule.segments[cursor.at];
      if (segment !== key && segment !== "*") continue;
      if (cursor.at === cursor.rule.segments.length - 1) {
        if (hit === undefined || (hit.action === "mask" && cursor.rule.action === "remove")) {
          hit = cursor.rule;
        }
      } else {
        next.push({ rule: cursor.rule, at: cursor.at + 1 });
      }
    }
    if (hit !== undefined) {
      const removal: Removal = {
        path: childPath,
        kind: "field",
        action: hit.action === "remove" ? "removed" : "masked",
      };
      if (hit.classification !== undefined) removal.classification = hit.classification;
      removed.push(removal);
      if (hit.action === "mask") out[key] = maskValue;
      continue;
    }
    out[key] = walk(child, childPath, next, plan, removed);
  }
  return out;
}
