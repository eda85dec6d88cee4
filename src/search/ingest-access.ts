import type { AuditWriter, RequestOrigin } from "../audit/index.js";
import type { DomainError } from "../errors.js";
import { invalidArgument } from "../errors.js";
import {
  accessChangeReason,
  accessChangeRefused,
  accessDetails,
  type DocumentAccess,
  sameAccess,
} from "../rag/access-change.js";
import type { IngestRecord } from "./ingest-store.js";

/**
 * Ingestion and who may read a document (src/rag/access-change.ts): a request that would
 * change a known document's required traits or classification is refused unless it says
 * `allow_access_change`; the refusal and each change made are audited with the access
 * before and after (never the path, title or content: they may name people).
 */

export interface AccessChange {
  /** The document's position in the request. */
  index: number;
  docId: string;
  path: string;
  before: DocumentAccess;
  after: DocumentAccess;
}

interface Prepared {
  docId: string;
  doc: { path: string; classification: string };
  requiredTraits: readonly string[];
}

/** Two documents of one request with one path (one id): which one wins would be chance. */
export function refuseDuplicates(prepared: readonly Prepared[]): void {
  const seen = new Set<string>();
  prepared.forEach((p, i) => {
    if (seen.has(p.docId)) {
      throw invalidArgument(
        "DUPLICATE_DOCUMENT",
        `documents[${i}].path is the path of an earlier document of this request`,
        { field: `documents[${i}].path` },
      );
    }
    seen.add(p.docId);
  });
}

/**
 * The documents whose access differs from the core's record of their last ingestion into
 * this backend. Records from before the core kept access (classification "") are not
 * compared: what they allowed is not known.
 */
export function accessChanges(
  prepared: readonly Prepared[],
  records: ReadonlyMap<string, IngestRecord>,
): AccessChange[] {
  const changes: AccessChange[] = [];
  prepared.forEach((p, index) => {
    const record = records.get(p.docId);
    if (record === undefined || record.classification === "") return;
    const after = { requiredTraits: p.requiredTraits, classification: p.doc.classification };
    if (!sameAccess(record, after)) {
      changes.push({ index, docId: p.docId, path: p.doc.path, before: record, after });
    }
  });
  return changes;
}

/** The error for a refused request: 409 ALREADY_EXISTS naming its first such document. */
export function refusal(changes: readonly AccessChange[]): DomainError {
  const [first] = changes;
  if (first === undefined) throw new Error("no access change to refuse");
  return accessChangeRefused(first.docId, `documents[${first.index}] (${first.path})`, {
    index: String(first.index),
    documents: String(changes.length),
  });
}

const changeDetails = (c: AccessChange) => ({
  doc_id: c.docId,
  before: accessDetails(c.before),
  after: accessDetails(c.after),
});

type AuditInput = Parameters<AuditWriter["write"]>[0];
interface Caller {
  kind: "user" | "service" | "system";
  id: string;
  origin?: RequestOrigin | undefined;
}
const actorOf = (caller: Caller) => ({
  actorType: caller.kind,
  actorId: caller.kind === "system" ? null : caller.id,
  origin: caller.origin ?? null,
});

/** The `rag_ingest` event of a request refused for access changes: nothing was indexed. */
export const refusalEvent = (
  caller: Caller,
  backendKey: string,
  changes: readonly AccessChange[],
  requestId: string,
): AuditInput => ({
  ...actorOf(caller),
  action: "rag_ingest",
  target: backendKey,
  outcome: "denied",
  requestId,
  details: {
    documents: 0,
    indexed: 0,
    chunks: 0,
    reason: accessChangeReason,
    refused: changes.map((c) => ({ index: c.index, ...changeDetails(c) })),
  },
});

/**
 * One `rag_access_change` event per document whose access a request changed. `unconfirmed`:
 * the call that carried the document failed in a way that does not say whether the backend
 * applied it (a reply that breaks the contract, a deadline, a lost connection, possibly after
 * the plugin's commit): outcome `error`, `confirmed: false`, so that no change the plugin may
 * have made goes unaudited.
 */
export const changeEvent = (
  caller: Caller,
  backendKey: string,
  change: AccessChange,
  requestId: string,
  unconfirmed = false,
): AuditInput => ({
  ...actorOf(caller),
  action: "rag_access_change",
  target: backendKey,
  outcome: unconfirmed ? "error" : "success",
  requestId,
  details: unconfirmed ? { ...changeDetails(change), confirmed: false } : changeDetails(change),
});
