import { DomainError } from "../errors.js";

/**
 * Who may read a document is its required traits and its classification. Indexing a document
 * again under the same id must not change them by accident (two folders with a notes.md, say,
 * one clinician-only and one public): such a write is refused unless the caller says that it
 * means it (`allow_access_change`). The plugin's store checks it in the write's transaction;
 * the core checks it first against its own record of what it ingested (src/search).
 */

export const accessChangeReason = "DOCUMENT_ACCESS_CHANGE";

export interface DocumentAccess {
  requiredTraits: readonly string[];
  classification: string;
}

const traitSet = (traits: readonly string[]) => [...new Set(traits)].sort();

/** The same traits (in any order, duplicates aside) and the same classification. */
export function sameAccess(a: DocumentAccess, b: DocumentAccess): boolean {
  const x = traitSet(a.requiredTraits);
  const y = traitSet(b.requiredTraits);
  return (
    a.classification === b.classification &&
    x.length === y.length &&
    x.every((trait, i) => trait === y[i])
  );
}

/** Access as an audit event shows it (traits sorted): never content, path or title. */
export const accessDetails = (access: DocumentAccess) => ({
  required_traits: traitSet(access.requiredTraits),
  classification: access.classification,
});

/** 409 ALREADY_EXISTS: the document exists with other access and no change was asked for. */
export function accessChangeRefused(
  docId: string,
  what: string,
  metadata: Record<string, string> = {},
): DomainError {
  return new DomainError(
    "already_exists",
    accessChangeReason,
    `${what} is already indexed with other required traits or classification; ` +
      "send allow_access_change to change who may read it",
    { metadata: { doc_id: docId, ...metadata } },
  );
}
