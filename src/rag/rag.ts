import { DomainError, invalidArgument } from "../errors.js";
import { type Embedder, norm } from "./embedder.js";
import type { ChunkRecord, DocumentRecord, RagStore } from "./store.js";

/** The fields of an Index request (docs/rag.md): one chunk, or a document with its chunks. */
export interface IndexInput {
  id: string;
  title: string;
  path: string;
  content: string;
  requiredTraits: readonly string[];
  classification: string;
  vector: ArrayLike<number>;
  document: DocumentRecord | undefined;
  chunks: readonly { chunkNo: number; content: string; vector: ArrayLike<number> }[];
  /** Change a stored document's required traits or classification (else refused). */
  allowAccessChange?: boolean;
}

/** An IndexBatch request: whole documents of one data class. */
export interface IndexBatchInput {
  classification: string;
  documents: readonly {
    document: DocumentRecord | undefined;
    chunks: IndexInput["chunks"];
  }[];
  allowAccessChange?: boolean;
}

export interface QueryInput {
  q: string;
  vector: ArrayLike<number>;
  /** 0 = the default (5). */
  topK: number;
  userTraits: readonly string[];
}

export interface QueryResultItem {
  id: string;
  docId: string;
  chunkNo: number;
  title: string;
  path: string;
  content: string;
  /** Cosine similarity in [−1, 1]: 1 − cosine distance. */
  score: number;
  requiredTraits: string[];
  classification: string;
}

export interface Rag {
  index(input: IndexInput, signal?: AbortSignal): Promise<{ docId: string; chunks: number }>;
  /** Several whole documents in one transaction (docs/rag.md, IndexBatch). */
  indexBatch(
    input: IndexBatchInput,
    signal?: AbortSignal,
  ): Promise<{ docId: string; chunks: number }[]>;
  query(input: QueryInput, signal?: AbortSignal): Promise<QueryResultItem[]>;
  delete(docId: string): Promise<{ docId: string; chunks: number }>;
  stats(): Promise<{ documents: number; chunks: number }>;
}

export const defaultTopK = 5;
export const maxTopK = 100;

const chunkId = /^(.+):(\d{1,7})$/;

/**
 * The plugin's domain: checks requests against the contract, embeds what came without a
 * vector, and leaves filtering and ranking to the store, which does both in one SQL query.
 */
export function createRag(deps: { store: RagStore; embedder: Embedder }): Rag {
  const { store, embedder } = deps;
  const { dimension } = embedder;

  /** A caller's vector: the configured length, finite, not all zeros. */
  function checkVector(vector: ArrayLike<number>, field: string): void {
    if (vector.length !== dimension) {
      throw invalidArgument(
        "VECTOR_DIMENSION",
        `${field} has ${vector.length} values; this plugin's embeddings have ${dimension} (EMBEDDING_DIM)`,
        { field, metadata: { expected: String(dimension), got: String(vector.length) } },
      );
    }
    for (let i = 0; i < vector.length; i++) {
      if (!Number.isFinite(vector[i])) {
        throw invalidArgument(
          "VECTOR_VALUE",
          `${field} holds a value that is not a finite number`,
          {
            field,
          },
        );
      }
    }
    if (norm(vector) === 0) {
      throw invalidArgument("ZERO_VECTOR", `${field} is all zeros: it has no direction`, { field });
    }
  }

  /** The document and its chunks (vectors still missing where the request had none). */
  function shape(input: IndexInput): {
    document: DocumentRecord;
    chunks: { chunkNo: number; content: string; vector: ArrayLike<number>; field: string }[];
    mode: "replace" | "upsert";
  } {
    if (input.document !== undefined) {
      const stray = (
        [
          ["id", input.id !== ""],
          ["title", input.title !== ""],
          ["path", input.path !== ""],
          ["content", input.content !== ""],
          ["required_traits", input.requiredTraits.length > 0],
          ["classification", input.classification !== ""],
          ["vector", input.vector.length > 0],
        ] as const
      ).find(([, set]) => set);
      if (stray) {
        throw invalidArgument(
          "INDEX_SHAPE",
          `${stray[0]} belongs in document or chunks when a whole document is sent`,
          { field: stray[0] },
        );
      }
      const seen = new Set<number>();
      const chunks = input.chunks.map((c, i) => {
        if (seen.has(c.chunkNo)) {
          throw invalidArgument("DUPLICATE_CHUNK", `chunk_no ${c.chunkNo} appears twice`, {
            field: `chunks[${i}].chunk_no`,
          });
        }
        seen.add(c.chunkNo);
        if (c.content.trim() === "") {
          throw invalidArgument("INVALID_FIELD", "a chunk needs content", {
            field: `chunks[${i}].content`,
          });
        }
        return { ...c, field: `chunks[${i}]` };
      });
      return { document: { ...input.document }, chunks, mode: "replace" };
    }
    if (input.chunks.length > 0) {
      throw invalidArgument("INDEX_SHAPE", "chunks need a document", { field: "document" });
    }
    const match = chunkId.exec(input.id);
    if (!match) {
      throw invalidArgument("CHUNK_ID", 'id must be "<doc_id>:<chunk_no>" (or send a document)', {
        field: "id",
      });
    }
    if (input.content.trim() === "") {
      throw invalidArgument("INVALID_FIELD", "a chunk needs content", { field: "content" });
    }
    const [, docId = "", chunkNo = "0"] = match;
    if (docId.length > 256) {
      throw invalidArgument("CHUNK_ID", "the document id is longer than 256 characters", {
        field: "id",
      });
    }
    return {
      document: {
        id: docId,
        title: input.title,
        path: input.path,
        requiredTraits: input.requiredTraits,
        classification: input.classification,
      },
      chunks: [
        { chunkNo: Number(chunkNo), content: input.content, vector: input.vector, field: "" },
      ],
      mode: "upsert",
    };
  }

  type Shaped = ReturnType<typeof shape>["chunks"];
  const field = (c: { field: string }, name: string) => (c.field ? `${c.field}.${name}` : name);

  /** Checks the vectors sent, embeds the chunks sent without one (one call for all). */
  async function embedMissing(chunks: Shaped, signal: AbortSignal | undefined): Promise<void> {
    for (const c of chunks) if (c.vector.length > 0) checkVector(c.vector, field(c, "vector"));
    const missing = chunks.filter((c) => c.vector.length === 0);
    if (missing.length === 0) return;
    const vectors = await embedder.embed(
      missing.map((c) => c.content),
      signal,
    );
    missing.forEach((c, i) => {
      const vector = vectors[i];
      if (vector === undefined || norm(vector) === 0) {
        throw invalidArgument("NOT_EMBEDDABLE", "the content has nothing the embedder can embed", {
          field: field(c, "content"),
        });
      }
      c.vector = vector;
    });
  }

  const records = (chunks: Shaped): ChunkRecord[] =>
    chunks.map((c) => ({ chunkNo: c.chunkNo, content: c.content, embedding: c.vector }));

  return {
    async index(input, signal) {
      const { document, chunks, mode } = shape(input);
      await embedMissing(chunks, signal);
      const written = await store.write(
        { ...document, requiredTraits: unique(document.requiredTraits) },
        records(chunks),
        mode,
        { allowAccessChange: input.allowAccessChange === true },
      );
      return { docId: document.id, chunks: written };
    },

    async indexBatch(input, signal) {
      const seen = new Set<string>();
      const shaped = input.documents.map((item, d) => {
        if (item.document === undefined) {
          throw invalidArgument("INDEX_SHAPE", "each document of a batch needs its document", {
            field: `documents[${d}].document`,
          });
        }
        // The gateway applied its policy to the batch's class: a document of another class
        // would pass under it unchecked.
        if (item.document.classification !== input.classification) {
          throw invalidArgument(
            "BATCH_CLASSIFICATION",
            `documents[${d}] is classified "${item.document.classification}", the batch "${input.classification}"`,
            { field: `documents[${d}].document.classification` },
          );
        }
        if (seen.has(item.document.id)) {
          throw invalidArgument("DUPLICATE_DOCUMENT", "a document appears twice in the batch", {
            field: `documents[${d}].document.id`,
          });
        }
        seen.add(item.document.id);
        const { document, chunks } = shape({
          id: "",
          title: "",
          path: "",
          content: "",
          requiredTraits: [],
          classification: "",
          vector: [],
          document: item.document,
          chunks: item.chunks,
        });
        for (const c of chunks) c.field = `documents[${d}].${c.field}`;
        return { document, chunks };
      });
      await embedMissing(
        shaped.flatMap((s) => s.chunks),
        signal,
      );
      const written = await store.writeMany(
        shaped.map(({ document, chunks }) => ({
          document: { ...document, requiredTraits: unique(document.requiredTraits) },
          chunks: records(chunks),
        })),
        { allowAccessChange: input.allowAccessChange === true },
      );
      return shaped.map(({ document }, d) => ({ docId: document.id, chunks: written[d] ?? 0 }));
    },

    async query(input, signal) {
      const hasQ = input.q.trim() !== "";
      const hasVector = input.vector.length > 0;
      if (hasQ === hasVector) {
        throw invalidArgument(
          "QUERY_INPUT",
          hasQ ? "send q or vector, not both" : "send q (text) or vector (an embedding)",
          { field: "q" },
        );
      }
      const topK = input.topK === 0 ? defaultTopK : input.topK;
      if (!Number.isInteger(topK) || topK < 1 || topK > maxTopK) {
        throw invalidArgument("INVALID_FIELD", `top_k must be from 1 to ${maxTopK}`, {
          field: "top_k",
        });
      }
      let vector = input.vector;
      if (hasVector) {
        checkVector(vector, "vector");
      } else {
        const [embedded] = await embedder.embed([input.q], signal);
        // Text with nothing to embed (only punctuation, say) is near nothing: no match.
        if (embedded === undefined || norm(embedded) === 0) return [];
        vector = embedded;
      }
      const hits = await store.search(vector, topK, unique(input.userTraits));
      return hits.map((h) => ({
        id: `${h.docId}:${h.chunkNo}`,
        docId: h.docId,
        chunkNo: h.chunkNo,
        title: h.title,
        path: h.path,
        content: h.content,
        score: Math.max(-1, Math.min(1, 1 - h.distance)),
        requiredTraits: h.requiredTraits,
        classification: h.classification,
      }));
    },

    async delete(docId) {
      const chunks = await store.delete(docId);
      if (chunks === undefined) {
        throw new DomainError("not_found", "DOCUMENT_NOT_FOUND", "no document has this id", {
          field: "doc_id",
        });
      }
      return { docId, chunks };
    },

    stats: () => store.stats(),
  };
}

const unique = (values: readonly string[]): string[] => [...new Set(values)];
