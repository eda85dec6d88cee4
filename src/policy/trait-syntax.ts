import { type DomainError, invalidArgument } from "../errors.js";

/**
 * Trait names are `<category>:<value>`: a lowercase category among the seven of
 * the spec and a value of `[a-z0-9_.-]+`. Parsing happens when a registry or a
 * policy is loaded and when a request names a trait the registry does not know
 * (to say precisely what is wrong with it); the hot path only looks names up.
 */
export const traitCategories = [
  "role",
  "capability",
  "data_access",
  "ui_feature",
  "plugin_type",
  "security",
  "compliance",
] as const;

export type TraitCategory = (typeof traitCategories)[number];

const categorySet: ReadonlySet<string> = new Set(traitCategories);
const valuePattern = /^[a-z0-9_.-]+$/;

export interface ParsedTrait {
  category: TraitCategory;
  value: string;
}

export function isTraitCategory(s: string): s is TraitCategory {
  return categorySet.has(s);
}

/** Why a trait name is not well formed, or undefined when it is. */
export function traitSyntaxError(name: unknown, field: string): DomainError | undefined {
  if (typeof name !== "string") {
    return invalidArgument("TRAIT_MALFORMED", `${field}: a trait must be a string`, { field });
  }
  const colon = name.indexOf(":");
  if (colon <= 0 || colon === name.length - 1) {
    return invalidArgument(
      "TRAIT_MALFORMED",
      `${field}: trait "${name}" is not <category>:<value>`,
      { field, metadata: { trait: name } },
    );
  }
  const category = name.slice(0, colon);
  if (!categorySet.has(category)) {
    return invalidArgument(
      "TRAIT_UNKNOWN_CATEGORY",
      `${field}: trait "${name}" has unknown category "${category}" (one of ${traitCategories.join(", ")})`,
      { field, metadata: { trait: name, category } },
    );
  }
  if (!valuePattern.test(name.slice(colon + 1))) {
    return invalidArgument(
      "TRAIT_MALFORMED",
      `${field}: trait "${name}" has a value outside [a-z0-9_.-]+`,
      { field, metadata: { trait: name } },
    );
  }
  return undefined;
}

/** Parses a trait name, throwing the precise error for a malformed one. */
export function parseTrait(name: unknown, field: string): ParsedTrait {
  const error = traitSyntaxError(name, field);
  if (error) throw error;
  const s = name as string;
  const colon = s.indexOf(":");
  return { category: s.slice(0, colon) as TraitCategory, value: s.slice(colon + 1) };
}

/** The error for a well-formed trait that the registry does not hold. */
export function unregisteredTrait(name: string, field: string): DomainError {
  return invalidArgument("TRAIT_UNREGISTERED", `${field}: trait "${name}" is not registered`, {
    field,
    metadata: { trait: name },
  });
}

/** The precise error for a name that a registry lookup missed. */
export function unknownTraitError(name: unknown, field: string): DomainError {
  return traitSyntaxError(name, field) ?? unregisteredTrait(name as string, field);
}
