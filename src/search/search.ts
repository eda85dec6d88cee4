import { createHash } from "node:crypto";
import type { AuditWriter, RequestOrigin } from "../audit/index.js";
import { DomainError, invalidArgument, permissionDenied } from "../errors.js";
import { neverForwarded } from "../gateway/gateway.js";
import type { Logger } from "../log.js";
import type { PolicyEngine } from "../policy/index.js";
import { accessChangeReason } from "../rag/access-change.js";
import { type BackendHit, indexEachDocument, PartlyIndexed, type RagBackend } from "./backend.js";
import { type ChunkingOptions, chunkText, defaultChunking, textOf } from "./chunking.js";
import {
  accessChanges,
  changeEvent,
  refusal,
  refusalEvent,
  refuseDuplicates,
} from "./ingest-access.js";
import type { IngestStore } from "./ingest-store.js";

/**
 * The core's retrieval: search over what the caller may read, and ingestion. The caller's
 * traits are the closure of their roles in the policy's trait registry, never anything the
 * request says; the backend filters by them in its query, and the core checks every item
 * again (required traits, then the policy on its classification) before returning it.
 * No transport types here.
 */

export interface SearchCaller {
  /** "system": the demo setup ingesting the sample corpus. */
  kind: "user" | "service" | "system";
  id: string;
  roles: readonly string[];
  /** Where the request came from, for the audit events (absent outside a request). */
  origin?: RequestOrigin | undefined;
}

export interface SearchResultItem extends Omit<BackendHit, "requiredTraits"> {
  /** The policy redacted the content for this caller. */
  sanitized: boolean;
}

export interface IngestDocumentInput {
  path: string;
  title: string;
  content: string;
  requiredTraits: readonly string[];
  classification: string;
}

export interface IngestedDocument {
  path: string;
  docId: string;
  chunks: number;
  skipped: boolean;
}

export interface Search {
  search(
    caller: SearchCaller,
    input: { q: string; topK: number },
    requestId: string,
  ): Promise<SearchResultItem[]>;
  /**
   * A document already ingested with other required traits or classification refuses the
   * request (DOCUMENT_ACCESS_CHANGE, nothing indexed) unless `allowAccessChange`.
   */
  ingest(
    caller: SearchCaller,
    documents: readonly IngestDocumentInput[],
    requestId: string,
    options?: { allowAccessChange?: boolean },
  ): Promise<IngestedDocument[]>;
}

export interface SearchDeps {
  /** The backend the settings choose now, and a key naming it (e.g. "plugin:rag"). */
  backend: () => { key: string; backend: RagBackend };
  policy: () => PolicyEngine;
  ingested: IngestStore;
  audit: Pick<AuditWriter, "write">;
  log: Logger;
  /** rag.top_k_default. */
  topKDefault: () => number;
  chunking?: ChunkingOptions;
}

export const searchContext = "SEARCH";
export const ingestCapability = "capability:ingest";

/** The traits a set of roles confers: `role:<r>` for each registered role, and all they imply. */
export function traitsOfRoles(engine: PolicyEngine, roles: readonly string[]): Set<string> {
  const { registry } = engine;
  const closure = new Set<string>();
  for (const role of roles) {
    const id = registry.idOf(`role:${role}`);
    if (id === undefined) continue;
    const row = id * registry.words;
    for (let w = 0; w < registry.words; w++) {
      let bits = registry.closures[row + w] ?? 0;
      while (bits !== 0) {
        const low = bits & -bits;
        const name = registry.names[w * 32 + 31 - Math.clz32(low)];
        if (name !== undefined) closure.add(name);
        bits ^= low;
      }
    }
  }
  return closure;
}

/**
 * `data_access:<class>` for every registered data class that the policy does not deny to
 * these role traits in context SEARCH. A class the policy cannot decide on is left out.
 */
function visibleClasses(engine: PolicyEngine, roleTraits: readonly string[]): string[] {
  const visible: string[] = [];
  for (const trait of engine.registry.inCategory("data_access")) {
    const dataClass = trait.slice("data_access:".length);
    try {
      const decision = engine.evaluate({
        traits: roleTraits,
        context: searchContext,
        classifications: [dataClass],
      });
      if (decision.decision !== "deny") visible.push(trait);
    } catch {
      // not decidable: not visible
    }
  }
  return visible;
}

/** A relative path without `..`, a leading slash, a drive or backslashes. */
function checkPath(path: string, index: number): string {
  const field = `documents[${index}].path`;
  if (
    path.startsWith("/") ||
    path.includes("\\") ||
    /^[A-Za-z]:/.test(path) ||
    path.split("/").some((s) => s === ".." || s === "." || s === "")
  ) {
    throw invalidArgument("INVALID_PATH", `${field} must be a relative path without . or ..`, {
      field,
    });
  }
  return path;
}

/**
 * Documents, chunks and chunk characters per backend call: a plugin's body limit is 16 MiB,
 * and a call must end within its deadline.
 */
const batchLimits = { documents: 100, chunks: 500, chars: 4 * 1024 * 1024 };

/** Positions cut into runs within the limits (a document larger than them goes alone). */
function slices(
  positions: readonly number[],
  prepared: readonly { chunks: readonly string[] }[],
  limits: typeof batchLimits,
): number[][] {
  const out: number[][] = [];
  let current: number[] = [];
  let chars = 0;
  let chunks = 0;
  for (const i of positions) {
    const docChunks = prepared[i]?.chunks ?? [];
    const size = docChunks.reduce((n, c) => n + c.length, 0);
    if (
      current.length > 0 &&
      (current.length >= limits.documents ||
        chunks + docChunks.length > limits.chunks ||
        chars + size > limits.chars)
    ) {
      out.push(current);
      current = [];
      chars = 0;
      chunks = 0;
    }
    current.push(i);
    chars += size;
    chunks += docChunks.length;
  }
  if (current.length > 0) out.push(current);
  return out;
}

const docIdOf = (path: string) =>
  `doc-${createHash("sha256").update(path).digest("hex").slice(0, 24)}`;

export function createSearch(deps: SearchDeps): Search {
  const { ingested, audit, log } = deps;
  const chunking = deps.chunking ?? defaultChunking;

  return {
    async search(caller, input, requestId) {
      const engine = deps.policy();
      const traits = traitsOfRoles(engine, caller.roles);
      const roleTraits = caller.roles
        .map((r) => `role:${r}`)
        .filter((t) => engine.registry.idOf(t) !== undefined);
      const topK = input.topK > 0 ? input.topK : deps.topKDefault();
      const { key, backend } = deps.backend();
      // The data classes the policy lets this caller see (allowed or sanitized) join the
      // traits the backend filters by; see ingest.
      const visible = [...traits, ...visibleClasses(engine, roleTraits)];
      const allowed = new Set(visible);
      // A backend answering more than asked is cut, not trusted.
      const hits = (
        await backend.query(
          { q: input.q, topK, userTraits: visible },
          { requestId, origin: caller.origin },
        )
      ).slice(0, topK);
      const verdicts = new Map<string, ReturnType<PolicyEngine["evaluate"]> | null>();
      const verdictFor = (classification: string) => {
        if (!verdicts.has(classification)) {
          try {
            verdicts.set(
              classification,
              engine.evaluate({
                traits: roleTraits,
                context: searchContext,
                classifications: classification ? [classification] : [],
              }),
            );
          } catch (err) {
            // An unknown classification cannot be decided: the item is dropped (fail closed).
            log.warn({ err, classification }, "search result dropped: policy could not decide");
            verdicts.set(classification, null);
          }
        }
        return verdicts.get(classification) ?? null;
      };
      // The backend's filter is not trusted alone, nor what it says of its documents: each
      // hit is checked against the core's own record of the document it ingested.
      const known = await ingested.findMany(key, [...new Set(hits.map((h) => h.docId))]);
      const items: SearchResultItem[] = [];
      let dropped = 0;
      for (const hit of hits) {
        const record = known.get(hit.docId);
        if (
          record === undefined ||
          !record.requiredTraits.every((t) => allowed.has(t)) ||
          !hit.requiredTraits.every((t) => allowed.has(t))
        ) {
          dropped++;
          continue;
        }
        const verdict = verdictFor(record.classification);
        if (verdict === null || verdict.decision === "deny") {
          dropped++;
          continue;
        }
        // Shown with the classification the core gave it at ingestion.
        const { requiredTraits: _, ...rest } = hit;
        const item = { ...rest, classification: record.classification };
        if (verdict.decision === "allow") {
          items.push({ ...item, sanitized: false });
        } else if (verdict.sanitize !== undefined) {
          const clean = engine.sanitize(
            { title: hit.title, content: hit.content },
            verdict.sanitize,
          ).document as { title?: string; content?: string };
          items.push({
            ...item,
            title: clean.title ?? "",
            content: clean.content ?? "",
            sanitized: true,
          });
        } else {
          dropped++; // a sanitize decision that names nothing to remove: fail closed
        }
      }
      if (dropped > 0 && hits.length > 0) {
        log.warn({ dropped, returned: items.length }, "search: items dropped by the core's checks");
      }
      await audit.write({
        actorType: caller.kind,
        actorId: caller.kind === "system" ? null : caller.id,
        origin: caller.origin ?? null,
        action: "search",
        target: null,
        outcome: "success",
        requestId,
        // Never the query text: it may hold personal or health data.
        details: {
          top_k: topK,
          results: items.length,
          dropped,
          sanitized: items.filter((i) => i.sanitized).length,
        },
      });
      return items;
    },

    async ingest(caller, documents, requestId, options = {}) {
      const allowAccessChange = options.allowAccessChange === true;
      const engine = deps.policy();
      if (!traitsOfRoles(engine, caller.roles).has(ingestCapability)) {
        throw permissionDenied("CAPABILITY", `ingestion needs a role with ${ingestCapability}`);
      }
      documents.forEach((doc, i) => {
        checkPath(doc.path, i);
        doc.requiredTraits.forEach((t, j) => {
          engine.registry.resolve(t, `documents[${i}].required_traits[${j}]`);
        });
        if (engine.registry.idOf(`data_access:${doc.classification}`) === undefined) {
          throw invalidArgument(
            "UNKNOWN_CLASSIFICATION",
            `documents[${i}].classification "${doc.classification}" is not a registered data class`,
            { field: `documents[${i}].classification` },
          );
        }
      });
      const { key, backend } = deps.backend();
      // Every document is extracted and chunked before anything is written, so a bad one
      // refuses the request without leaving the others half done.
      const prepared = documents.map((doc, i) => {
        const text = textOf(doc.path, doc.content);
        const chunks = chunkText(text, chunking);
        if (chunks.length === 0) {
          throw invalidArgument("EMPTY_DOCUMENT", `${doc.path} has no text to index`, {
            field: `documents[${i}].content`,
          });
        }
        const title = doc.title || doc.path.split("/").at(-1) || doc.path;
        // The document's data class is a required trait too (`data_access:<class>`): search
        // then hands the backend only the classes the caller's policy does not deny, so the
        // backend's filter — inside its query, before its LIMIT — keeps them out, and a denied
        // nearest document cannot crowd out allowed ones.
        const requiredTraits = [
          ...new Set([...doc.requiredTraits, `data_access:${doc.classification}`]),
        ].sort();
        const hash = createHash("sha256")
          // "v2": documents indexed before the class trait was added are indexed again.
          .update(JSON.stringify(["v2", doc.path, title, text, requiredTraits, doc.classification]))
          .digest("hex");
        return { doc, docId: docIdOf(doc.path), title, requiredTraits, chunks, hash };
      });
      refuseDuplicates(prepared);
      // Who may read a document does not change unless the caller says so (ingest-access.ts).
      const records = await ingested.findMany(
        key,
        prepared.map((p) => p.docId),
      );
      const changes = accessChanges(prepared, records);
      if (changes.length > 0 && !allowAccessChange) {
        await audit.write(refusalEvent(caller, key, changes, requestId));
        throw refusal(changes);
      }
      const changeOf = new Map(changes.map((c) => [c.docId, c]));
      const results: (IngestedDocument | undefined)[] = prepared.map(() => undefined);
      // Unchanged documents are skipped; the others go to the backend in batches of one
      // data class (where the gateway's policy reads it), each batch one call and, in the
      // backend, one transaction.
      const batches = new Map<string, number[]>();
      prepared.forEach((p, i) => {
        const previous = records.get(p.docId);
        // Records from before the core kept traits and classification (classification "")
        // are indexed again, so that search can check results against them.
        if (previous?.contentHash === p.hash && previous.classification !== "") {
          results[i] = { path: p.doc.path, docId: p.docId, chunks: previous.chunks, skipped: true };
          return;
        }
        const batch = batches.get(p.doc.classification) ?? [];
        batch.push(i);
        batches.set(p.doc.classification, batch);
      });
      let failure: unknown;
      let failedIndex = 0;
      try {
        for (const positions of batches.values()) {
          for (let slice of slices(positions, prepared, batchLimits)) {
            failedIndex = slice[0] ?? 0;
            const docs = slice.map((i) => {
              const p = prepared[i] as (typeof prepared)[number];
              return {
                id: p.docId,
                title: p.title,
                path: p.doc.path,
                requiredTraits: p.requiredTraits,
                classification: p.doc.classification,
                chunks: p.chunks,
              };
            });
            const request = { requestId, origin: caller.origin };
            /** The access changes of documents a failed call may have written all the same. */
            const auditUnconfirmed = async (positions: readonly number[]) => {
              for (const i of positions) {
                const change = changeOf.get((prepared[i] as (typeof prepared)[number]).docId);
                if (change) await audit.write(changeEvent(caller, key, change, requestId, true));
              }
            };
            let written: readonly number[];
            let partial: PartlyIndexed | undefined;
            try {
              written = backend.indexMany
                ? await backend.indexMany(docs, request, { allowAccessChange })
                : await indexEachDocument(backend.index, docs, request, { allowAccessChange });
            } catch (err) {
              // One call per document, and one failed (after others were indexed, or first):
              // those indexed are recorded and audited, then the request fails. The call that
              // failed (the whole batch, or the one document) is not recorded, so the next
              // ingest asks for its access change again; the change is audited as
              // unconfirmed. Documents after it were never sent: nothing of them is audited.
              if (!(err instanceof PartlyIndexed)) {
                if (mayHaveWritten(err)) await auditUnconfirmed(slice);
                throw err;
              }
              partial = err;
              written = err.written;
              if (mayHaveWritten(err.cause)) {
                await auditUnconfirmed(slice.slice(written.length, written.length + 1));
              }
              slice = slice.slice(0, written.length);
            }
            // The backend has written these: their access changes are audited first, so that a
            // failure to record them below loses no event.
            for (const i of slice) {
              const change = changeOf.get((prepared[i] as (typeof prepared)[number]).docId);
              if (change) await audit.write(changeEvent(caller, key, change, requestId));
            }
            await ingested.recordMany(
              key,
              slice.map((i, j) => {
                const p = prepared[i] as (typeof prepared)[number];
                return {
                  docId: p.docId,
                  path: p.doc.path,
                  contentHash: p.hash,
                  chunks: written[j] ?? 0,
                  requiredTraits: p.requiredTraits,
                  classification: p.doc.classification,
                };
              }),
            );
            for (const [j, i] of slice.entries()) {
              const p = prepared[i] as (typeof prepared)[number];
              results[i] = {
                path: p.doc.path,
                docId: p.docId,
                chunks: written[j] ?? 0,
                skipped: false,
              };
            }
            if (partial) {
              failedIndex = positions[positions.indexOf(failedIndex) + written.length] ?? 0;
              throw partial.cause;
            }
          }
        }
      } catch (err) {
        failure = err;
      }
      const answered = results.filter((r): r is IngestedDocument => r !== undefined);
      // What was indexed is audited even when a later document failed (and so not answered).
      await audit.write({
        actorType: caller.kind,
        actorId: caller.kind === "system" ? null : caller.id,
        origin: caller.origin ?? null,
        action: "rag_ingest",
        target: key,
        outcome: failure === undefined ? "success" : "failure",
        requestId,
        details: {
          documents: answered.length,
          indexed: answered.filter((r) => !r.skipped).length,
          chunks: answered.reduce((n, r) => n + (r.skipped ? 0 : r.chunks), 0),
          ...(allowAccessChange ? { allow_access_change: true } : {}),
          ...(failure === undefined
            ? {}
            : {
                // Its position (the first of the batch that failed), not its path: paths
                // may name people.
                failed_index: failedIndex,
                reason: failure instanceof DomainError ? failure.reason : "INTERNAL",
              }),
        },
      });
      if (failure !== undefined) throw failure;
      return answered;
    },
  };
}

/**
 * Whether a failed index call may have written its documents all the same: anything but the
 * backend's own refusal of an access change (made inside its transaction, which it rolled
 * back) and a gateway call refused before its payload was handed on.
 */
const mayHaveWritten = (err: unknown): boolean =>
  !(err instanceof DomainError && err.reason === accessChangeReason) && !neverForwarded(err);
