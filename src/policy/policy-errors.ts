import { DomainError, invalidArgument } from "../errors.js";
import type { PolicyIssue } from "./validate.js";

/** Most issues listed in an error's metadata (the dry-run answers all of them). */
const maxListedIssues = 20;

/**
 * A policy (or a registry change) that does not validate: 400 with the first issue's reason
 * and field, the trait it names (when it names one), and the issues in `metadata.issues`
 * as `REASON field` lines.
 */
export function policyInvalid(issues: readonly PolicyIssue[], document: unknown): DomainError {
  const first = issues[0]!;
  const trait = valueAt(document, first.field);
  const metadata: Record<string, string> = {
    issues: issues
      .slice(0, maxListedIssues)
      .map((i) => `${i.reason} ${i.field}`)
      .join("\n"),
  };
  if (first.ruleId !== undefined) metadata.rule_id = first.ruleId;
  if (first.reason.startsWith("TRAIT_") && typeof trait === "string") metadata.trait = trait;
  return invalidArgument(
    first.reason,
    `${first.message}${issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""}`,
    { field: first.field, metadata },
  );
}

export const notFound = (reason: string, message: string, metadata: Record<string, string>) =>
  new DomainError("not_found", reason, message, { metadata });

export const failedPrecondition = (
  reason: string,
  message: string,
  metadata: Record<string, string>,
) => new DomainError("failed_precondition", reason, message, { metadata });

/** The value at a validator field path (`rules[1].when.all[0]`), if there is one. */
export function valueAt(document: unknown, field: string): unknown {
  let at: unknown = document;
  for (const part of field.match(/[^.[\]]+/g) ?? []) {
    if (at === null || typeof at !== "object") return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}
