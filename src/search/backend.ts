import type { JsonObject } from "@bufbuild/protobuf";
import type { RequestOrigin } from "../audit/index.js";
import { DomainError } from "../errors.js";
import { type Gateway, type GatewayCaller, PluginError } from "../gateway/gateway.js";
import { accessChangeReason, accessChangeRefused } from "../rag/access-change.js";
import type { Rag } from "../rag/rag.js";

/**
 * Where documents are indexed and searched: the built-in store in the core's own
 * database, or an operator's RAG plugin reached through the gateway as `ai-core`.
 * Both speak the plugin contract of docs/rag.md; the backend embeds the text.
 */

export interface BackendDocument {
  id: string;
  title: string;
  path: string;
  requiredTraits: readonly string[];
  classification: string;
  chunks: readonly string[];
}

export interface BackendHit {
  id: string;
  docId: string;
  chunkNo: number;
  title: string;
  path: string;
  content: string;
  score: number;
  requiredTraits: readonly string[];
  classification: string;
}

export interface IndexOptions {
  /** Change the stored document's required traits or classification (else DOCUMENT_ACCESS_CHANGE). */
  allowAccessChange?: boolean;
}

/** The request a backend call serves: its id and origin go on the operator_call event. */
export interface BackendRequest {
  requestId: string;
  origin?: RequestOrigin | undefined;
}

/** How much a backend holds. */
export interface BackendStats {
  documents: number;
  chunks: number;
}

export interface RagBackend {
  /** Replaces the document's chunks; the number indexed. */
  index(doc: BackendDocument, request: BackendRequest, options?: IndexOptions): Promise<number>;
  /**
   * Documents of one data class, each replacing its chunks, in one call and one transaction
   * where the backend can (nothing written on a refusal); the chunks indexed per document.
   * Absent: one `index` per document.
   */
  indexMany?(
    docs: readonly BackendDocument[],
    request: BackendRequest,
    options?: IndexOptions,
  ): Promise<number[]>;
  query(
    input: { q: string; topK: number; userTraits: readonly string[] },
    request: BackendRequest,
  ): Promise<BackendHit[]>;
  /** Its document and chunk counts; undefined when it does not report them. */
  stats(request: BackendRequest): Promise<BackendStats | undefined>;
}

/**
 * A per-document `indexMany` stopped by a failure: which documents were indexed before it
 * (`written`, the first ones, in order; none when the first failed), so that the core records
 * and audits them, and knows that only the next one was being written when it failed.
 */
export class PartlyIndexed extends Error {
  override readonly name = "PartlyIndexed";
  constructor(
    readonly written: readonly number[],
    override readonly cause: unknown,
  ) {
    super("a document failed to be indexed", { cause });
  }
}

/** `indexMany` as one `index` per document (PartlyIndexed when one fails). */
export async function indexEachDocument(
  index: RagBackend["index"],
  docs: readonly BackendDocument[],
  request: BackendRequest,
  options?: IndexOptions,
): Promise<number[]> {
  const written: number[] = [];
  for (const doc of docs) {
    try {
      written.push(await index(doc, request, options));
    } catch (err) {
      throw new PartlyIndexed(written, err);
    }
  }
  return written;
}

/** A document as the built-in store takes it: its record and its chunks (the store embeds them). */
const storeDocument = (doc: BackendDocument) => ({
  document: {
    id: doc.id,
    title: doc.title,
    path: doc.path,
    requiredTraits: [...doc.requiredTraits],
    classification: doc.classification,
  },
  chunks: doc.chunks.map((content, chunkNo) => ({ chunkNo, content, vector: [] })),
});

/** The built-in store (src/rag) on the core's database. */
export function builtinBackend(rag: Rag): RagBackend {
  return {
    async index(doc, _request, options) {
      const { chunks } = await rag.index({
        id: "",
        title: "",
        path: "",
        content: "",
        requiredTraits: [],
        classification: "",
        vector: [],
        ...storeDocument(doc),
        allowAccessChange: options?.allowAccessChange === true,
      });
      return chunks;
    },
    async indexMany(docs, _request, options) {
      const written = await rag.indexBatch({
        classification: docs[0]?.classification ?? "",
        documents: docs.map(storeDocument),
        allowAccessChange: options?.allowAccessChange === true,
      });
      return written.map((w) => w.chunks);
    },
    async query(input) {
      return rag.query({ q: input.q, vector: [], topK: input.topK, userTraits: input.userTraits });
    },
    stats: () => rag.stats(),
  };
}

/** The core's identity on the operator lane. */
export const aiCoreCaller: GatewayCaller = { kind: "service", id: "ai-core", name: "ai-core" };

/** The optional operation a RAG plugin indexes several documents with (docs/rag.md). */
export const ragIndexBatchOperation = "rag_index_batch";

/** The deadline asked for a rag_index_batch call. */
const batchTimeoutMs = 60_000;

/** The optional operation a RAG plugin reports its counts with (docs/rag.md). */
export const ragStatsOperation = "rag_stats";

/**
 * A plugin through the gateway (allowlist, policy and audit apply), as `ai-core`.
 * `declares` says whether the plugin's manifest has an operation: counts are asked only
 * of a plugin that declares rag_stats.
 */
export function pluginBackend(
  gateway: Gateway,
  pluginId: string,
  declares: (pluginId: string, operation: string) => Promise<boolean>,
): RagBackend {
  const call = (
    operation: string,
    payload: JsonObject,
    request: BackendRequest,
    timeoutMs?: number,
  ) =>
    gateway.call({
      caller: aiCoreCaller,
      callerPlugin: aiCoreCaller.name,
      pluginId,
      operation,
      payload,
      timeoutMs,
      ...request,
    });
  /** The plugin's own access check refusing: the core's refusal, not a plugin failure. */
  const accessRefusal = (docId: string | undefined) => (err: unknown) => {
    if (
      err instanceof PluginError &&
      err.status === 409 &&
      reasonOf(err.body) === accessChangeReason
    ) {
      const id = docId ?? metadataOf(err.body)?.doc_id ?? "";
      throw accessChangeRefused(id, `document ${id}`, { plugin: pluginId });
    }
    throw err;
  };
  const documentOf = (doc: BackendDocument) => ({
    id: doc.id,
    title: doc.title,
    path: doc.path,
    required_traits: [...doc.requiredTraits],
    classification: doc.classification,
  });
  const chunksOf = (doc: BackendDocument) =>
    doc.chunks.map((content, chunk_no) => ({ chunk_no, content }));
  const backend: RagBackend & Required<Pick<RagBackend, "indexMany">> = {
    async indexMany(docs, request, options) {
      const first = docs[0];
      if (first === undefined) return [];
      if (docs.length === 1 || !(await declares(pluginId, ragIndexBatchOperation))) {
        return indexEachDocument(backend.index, docs, request, options);
      }
      const reply = await call(
        ragIndexBatchOperation,
        {
          // The batch's data class, where the gateway's policy reads it (one class a batch).
          classification: first.classification,
          documents: docs.map((doc) => ({ document: documentOf(doc), chunks: chunksOf(doc) })),
          ...(options?.allowAccessChange ? { allow_access_change: true } : {}),
        },
        request,
        // A batch into an indexed table takes a few ms a chunk on an embedded database, and
        // waits behind the batches of other requests: more than the default deadline (the
        // gateway caps it at GATEWAY_MAX_TIMEOUT_MS).
        batchTimeoutMs,
      ).catch(accessRefusal(undefined));
      const answered = reply.documents;
      if (!Array.isArray(answered) || answered.length !== docs.length) {
        throw badReply("documents must hold one answer per document sent");
      }
      return answered.map((a, i) => {
        const chunks = (a as { chunks?: unknown } | null)?.chunks;
        return typeof chunks === "number" ? chunks : (docs[i]?.chunks.length ?? 0);
      });
    },
    async index(doc, request, options) {
      const reply = await call(
        "rag_index",
        {
          document: documentOf(doc),
          chunks: chunksOf(doc),
          ...(options?.allowAccessChange ? { allow_access_change: true } : {}),
        },
        request,
      ).catch(accessRefusal(doc.id));
      return typeof reply.chunks === "number" ? reply.chunks : doc.chunks.length;
    },
    async query(input, request) {
      const reply = await call(
        "rag_query",
        { q: input.q, top_k: input.topK, user_traits: [...input.userTraits] },
        request,
      );
      if (!Array.isArray(reply.items)) throw badReply("items is not a list");
      return reply.items.map(hitOf);
    },
    async stats(request) {
      if (!(await declares(pluginId, ragStatsOperation))) return undefined;
      const reply = await call(ragStatsOperation, {}, request);
      return { documents: count(reply.documents), chunks: count(reply.chunks) };
    },
  };
  return backend;
}

/**
 * A count in a plugin's JSON reply: a number, or a decimal string (int64 in proto JSON);
 * absent is 0 (proto JSON leaves zero values out).
 */
function count(value: unknown): number {
  if (value === undefined) return 0;
  const n = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
    throw badReply("documents and chunks must be counts");
  }
  return n;
}

/** The reason of a plugin's error body (`{code, message, details: [{reason}]}`). */
function reasonOf(body: Record<string, unknown> | undefined): string | undefined {
  const details = body?.details;
  if (!Array.isArray(details)) return undefined;
  for (const d of details) {
    if (
      d !== null &&
      typeof d === "object" &&
      typeof (d as { reason?: unknown }).reason === "string"
    ) {
      return (d as { reason: string }).reason;
    }
  }
  return undefined;
}

/** The string metadata of a plugin's error body's first detail that has some. */
function metadataOf(body: Record<string, unknown> | undefined): Record<string, string> | undefined {
  const details = body?.details;
  if (!Array.isArray(details)) return undefined;
  for (const d of details) {
    const metadata = (d as { metadata?: unknown } | null)?.metadata;
    if (metadata !== null && typeof metadata === "object" && !Array.isArray(metadata)) {
      return Object.fromEntries(
        Object.entries(metadata).filter((e): e is [string, string] => typeof e[1] === "string"),
      );
    }
  }
  return undefined;
}

const badReply = (why: string) =>
  new DomainError(
    "internal",
    "PLUGIN_BAD_REPLY",
    `the RAG plugin's reply does not follow the contract: ${why}`,
  );

function hitOf(item: unknown): BackendHit {
  if (item === null || typeof item !== "object" || Array.isArray(item))
    throw badReply("an item is not an object");
  const o = item as Record<string, unknown>;
  const str = (k: string) => (typeof o[k] === "string" ? (o[k] as string) : "");
  const traits = o.required_traits;
  if (!Array.isArray(traits) || !traits.every((t) => typeof t === "string")) {
    // Without its required traits the core cannot re-check an item: refuse the reply.
    throw badReply("an item has no required_traits");
  }
  if (typeof o.classification !== "string" || o.classification === "") {
    // Without it the core cannot apply its policy to the item.
    throw badReply("an item has no classification");
  }
  return {
    id: str("id"),
    docId: str("doc_id"),
    chunkNo: typeof o.chunk_no === "number" ? o.chunk_no : 0,
    title: str("title"),
    path: str("path"),
    content: str("content"),
    score: typeof o.score === "number" ? o.score : 0,
    requiredTraits: traits,
    classification: str("classification"),
  };
}
