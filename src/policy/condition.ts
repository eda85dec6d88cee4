import { CelScalar, celEnv, isCelError, parse, plan } from "@bufbuild/cel";

/**
 * CEL conditions of rules. Parsed and planned once when a policy compiles;
 * evaluated only for a rule whose traits already matched. The only variable
 * is `request`: `{user_id, context, traits, classifications, resource}` where
 * `traits` is the caller's trait set after implication.
 */
export interface ConditionInput {
  user_id: string;
  context: string;
  traits: readonly string[];
  classifications: readonly string[];
  resource: Readonly<Record<string, unknown>>;
}

/** true / false, or the reason the condition could not be decided. */
export type ConditionResult = boolean | { error: string };

export type CompiledCondition = (request: ConditionInput) => ConditionResult;

const env = celEnv({ variables: { request: CelScalar.DYN } });
const declared = new Set(["request"]);

/** Compiles a condition, or throws an Error saying why it is not valid CEL for a rule. */
export function compileCondition(source: string): CompiledCondition {
  const parsed = parse(source);
  const unknown = freeIdentifiers(parsed.expr).filter((name) => !declared.has(name));
  if (unknown.length > 0) {
    throw new Error(`unknown variable ${unknown.join(", ")} (only "request" is defined)`);
  }
  const run = plan(env, parsed);
  return (request) => {
    try {
      // Plain JSON values are valid CEL input; the DYN declaration cannot say so statically.
      const value = run({ request: request as unknown as Record<string, never> });
      if (isCelError(value)) return { error: value.message };
      if (typeof value !== "boolean") return { error: "condition did not yield a boolean" };
      return value;
    } catch (err) {
      return { error: err instanceof Error ? err.message : String(err) };
    }
  };
}

/** Identifiers an expression reads that no comprehension inside it binds. */
function freeIdentifiers(root: unknown): string[] {
  const bound = new Set<string>();
  const used = new Set<string>();
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) walk(item);
      return;
    }
    if (node === null || typeof node !== "object") return;
    const kind = (node as { exprKind?: { case?: string; value?: Record<string, unknown> } })
      .exprKind;
    if (kind?.case === "identExpr") used.add(String(kind.value?.name));
    if (kind?.case === "comprehensionExpr") {
      for (const key of ["iterVar", "iterVar2", "accuVar"]) {
        const name = kind.value?.[key];
        if (typeof name === "string" && name !== "") bound.add(name);
      }
    }
    for (const value of Object.values(node)) walk(value);
  };
  walk(root);
  return [...used].filter((name) => !bound.has(name));
}
