import type { Database, Executor } from "../storage/index.js";
import type { HnswConfig } from "./config.js";

export interface DocumentRecord {
  id: string;
  title: string;
  path: string;
  requiredTraits: readonly string[];
  classification: string;
}

export interface ChunkRecord {
  chunkNo: number;
  content: string;
  embedding: ArrayLike<number>;
}

export interface SearchHit {
  docId: string;
  chunkNo: number;
  content: string;
  title: string;
  path: string;
  requiredTraits: string[];
  classification: string;
  /** Cosine distance (pgvector `<=>`): 1 − cosine similarity, in [0, 2]. */
  distance: number;
}

export interface RagStore {
  /**
   * Upserts the document and writes its chunks in one transaction: "replace" deletes the
   * document's other chunks first (a re-index never leaves a mix); "upsert" writes these
   * chunks over the same numbers and keeps the others. Returns the chunks written.
   */
  write(
    document: DocumentRecord,
    chunks: readonly ChunkRecord[],
    mode: "replace" | "upsert",
  ): Promise<number>;
  /** The chunks removed with the document, or undefined when there was no such document. */
  delete(docId: string): Promise<number | undefined>;
  /**
   * The `topK` chunks nearest to `vector` among those whose required traits are all in
   * `userTraits`, nearest first (ties by document id, then chunk number).
   */
  search(
    vector: ArrayLike<number>,
    topK: number,
    userTraits: readonly string[],
  ): Promise<SearchHit[]>;
  stats(): Promise<{ documents: number; chunks: number }>;
}

export interface RagStoreOptions {
  db: Database;
  /** "" when the process serves no particular tenant. */
  tenant: string;
  hnsw: Pick<HnswConfig, "efSearch" | "maxScanTuples" | "exactThreshold">;
  /** Rows per multi-row INSERT (default 500). */
  insertBatch?: number;
  /** Told how each search went (metrics, tests); never given vectors or traits. */
  onSearch?: (info: SearchInfo) => void;
}

export interface SearchInfo {
  /** "hnsw": the index with an iterative scan; "exact": every allowed chunk ranked;
   * "hnsw+exact": the iterative scan stopped at max_scan_tuples short of top_k. */
  path: "hnsw" | "exact" | "hnsw+exact";
  /** Chunks the user may see, counted up to max(threshold, top_k) + 1. */
  allowed: number;
  results: number;
}

/** A vector as pgvector's text input, `[x,y,…]`; passed as a parameter cast to ::vector. */
export const vectorLiteral = (vector: ArrayLike<number>): string =>
  `[${Array.prototype.join.call(vector, ",")}]`;

// Statements are built once; only parameters change per call.
const setTenant = "SELECT set_config('traitgate.rag_tenant', $1, true)";

const upsertDocument = `
  INSERT INTO rag_documents (tenant, id, title, path, required_traits, classification)
  VALUES ($1, $2, $3, $4, $5::text[], $6)
  ON CONFLICT (tenant, id) DO UPDATE SET
    title = excluded.title, path = excluded.path, required_traits = excluded.required_traits,
    classification = excluded.classification, updated_at = now()`;

const insertChunks = (conflict: string) => `
  INSERT INTO rag_chunks (tenant, doc_id, chunk_no, content, required_traits, embedding)
  SELECT $1, $2, t.chunk_no, t.content, $3::text[], t.embedding::vector
    FROM unnest($4::int[], $5::text[], $6::text[]) AS t(chunk_no, content, embedding)
  ${conflict}`;
const insertChunksFresh = insertChunks("");
const upsertChunks = insertChunks(`ON CONFLICT (tenant, doc_id, chunk_no) DO UPDATE SET
    content = excluded.content, required_traits = excluded.required_traits,
    embedding = excluded.embedding`);

/** The other chunks of an upserted document take its (possibly new) required traits. */
const syncTraits = `
  UPDATE rag_chunks SET required_traits = $3::text[]
   WHERE tenant = $1 AND doc_id = $2 AND required_traits IS DISTINCT FROM $3::text[]`;

// The search settings, for this transaction only. relaxed_order lets the index scan go on
// past ef_search candidates until LIMIT rows pass the filter (or max_scan_tuples is
// reached); the outer ORDER BY restores the exact order of what it found.
const searchSettings = `
  SELECT set_config('traitgate.rag_tenant', $1, true),
         set_config('hnsw.ef_search', $2, true),
         set_config('hnsw.iterative_scan', 'relaxed_order', true),
         set_config('hnsw.max_scan_tuples', $3, true)`;

/**
 * The path is chosen here, from the count, not by the planner's estimates: through HNSW,
 * nothing but the vector index may produce the order; exactly, no plain index scans
 * (pgvector's way to an exact search; bitmap scans on the GIN index stay).
 */
const hnswScan = `SELECT set_config('enable_seqscan', 'off', true),
                         set_config('enable_bitmapscan', 'off', true)`;
const exactScan = `SELECT set_config('enable_seqscan', 'on', true),
                          set_config('enable_bitmapscan', 'on', true),
                          set_config('enable_indexscan', 'off', true)`;

/** How many chunks the user may see, counted up to a cap ($3). */
const countAllowed = `
  SELECT count(*)::int AS allowed FROM (
    SELECT 1 FROM rag_chunks WHERE tenant = $1 AND required_traits <@ $2::text[] LIMIT $3
  ) AS allowed`;

const nearest = `
  WITH nearest AS MATERIALIZED (
    SELECT doc_id, chunk_no, content, embedding <=> $2::vector AS distance
      FROM rag_chunks
     WHERE tenant = $1 AND required_traits <@ $3::text[]
     ORDER BY embedding <=> $2::vector
     LIMIT $4
  )
  SELECT n.doc_id, n.chunk_no, n.content, n.distance,
         d.title, d.path, d.required_traits, d.classification
    FROM nearest n JOIN rag_documents d ON d.tenant = $1 AND d.id = n.doc_id
   ORDER BY n.distance, n.doc_id, n.chunk_no`;

interface HitRow {
  doc_id: string;
  chunk_no: number;
  content: string;
  distance: number;
  title: string;
  path: string;
  required_traits: string[];
  classification: string;
}

export function createRagStore(options: RagStoreOptions): RagStore {
  const { db, tenant, hnsw, onSearch } = options;
  const insertBatch = options.insertBatch ?? 500;
  const maxScanTuples = String(hnsw.maxScanTuples);

  async function insert(
    tx: Executor,
    sql: string,
    document: DocumentRecord,
    chunks: readonly ChunkRecord[],
  ): Promise<void> {
    for (let start = 0; start < chunks.length; start += insertBatch) {
      const slice = chunks.slice(start, start + insertBatch);
      await tx.query(sql, [
        tenant,
        document.id,
        document.requiredTraits,
        slice.map((c) => c.chunkNo),
        slice.map((c) => c.content),
        slice.map((c) => vectorLiteral(c.embedding)),
      ]);
    }
  }

  const rank = async (tx: Executor, vector: string, topK: number, traits: readonly string[]) =>
    (await tx.query<HitRow>(nearest, [tenant, vector, traits, topK])).rows;

  return {
    async write(document, chunks, mode) {
      return db.transaction(async (tx) => {
        await tx.query(setTenant, [tenant]);
        await tx.query(upsertDocument, [
          tenant,
          document.id,
          document.title,
          document.path,
          document.requiredTraits,
          document.classification,
        ]);
        if (mode === "replace") {
          await tx.query("DELETE FROM rag_chunks WHERE tenant = $1 AND doc_id = $2", [
            tenant,
            document.id,
          ]);
          await insert(tx, insertChunksFresh, document, chunks);
        } else {
          await insert(tx, upsertChunks, document, chunks);
          await tx.query(syncTraits, [tenant, document.id, document.requiredTraits]);
        }
        return chunks.length;
      });
    },

    async delete(docId) {
      return db.transaction(async (tx) => {
        await tx.query(setTenant, [tenant]);
        const removed = await tx.query<{ n: number }>(
          `WITH gone AS (DELETE FROM rag_chunks WHERE tenant = $1 AND doc_id = $2 RETURNING 1)
           SELECT count(*)::int AS n FROM gone`,
          [tenant, docId],
        );
        const doc = await tx.query("DELETE FROM rag_documents WHERE tenant = $1 AND id = $2", [
          tenant,
          docId,
        ]);
        return doc.rowCount === 0 ? undefined : Number(removed.rows[0]?.n ?? 0);
      });
    },

    async search(vector, topK, userTraits) {
      const literal = vectorLiteral(vector);
      const { rows, path, allowed } = await db.transaction(async (tx) => {
        await tx.query(searchSettings, [
          tenant,
          String(Math.max(hnsw.efSearch, topK)),
          maxScanTuples,
        ]);
        // Counting stops past the threshold (or top_k): enough to pick the path.
        const cap = Math.max(hnsw.exactThreshold, topK) + 1;
        const counted = await tx.query<{ allowed: number }>(countAllowed, [
          tenant,
          userTraits,
          cap,
        ]);
        const allowed = Number(counted.rows[0]?.allowed ?? 0);
        if (allowed === 0) return { rows: [], path: "exact" as const, allowed };
        if (allowed > hnsw.exactThreshold) {
          await tx.query(hnswScan);
          const found = await rank(tx, literal, topK, userTraits);
          // Enough, unless the iterative scan gave up (max_scan_tuples) first.
          if (found.length >= Math.min(topK, allowed)) {
            return { rows: found, path: "hnsw" as const, allowed };
          }
          await tx.query(exactScan);
          return {
            rows: await rank(tx, literal, topK, userTraits),
            path: "hnsw+exact" as const,
            allowed,
          };
        }
        // Few allowed chunks: rank them all, without the vector index.
        await tx.query(exactScan);
        return { rows: await rank(tx, literal, topK, userTraits), path: "exact" as const, allowed };
      });
      onSearch?.({ path, allowed, results: rows.length });
      return rows.map((r) => ({
        docId: r.doc_id,
        chunkNo: Number(r.chunk_no),
        content: r.content,
        title: r.title,
        path: r.path,
        requiredTraits: r.required_traits,
        classification: r.classification,
        distance: Number(r.distance),
      }));
    },

    async stats() {
      return db.transaction(async (tx) => {
        await tx.query(setTenant, [tenant]);
        const { rows } = await tx.query<{ documents: string; chunks: string }>(
          `SELECT (SELECT count(*) FROM rag_documents WHERE tenant = $1) AS documents,
                  (SELECT count(*) FROM rag_chunks WHERE tenant = $1) AS chunks`,
          [tenant],
        );
        return { documents: Number(rows[0]?.documents ?? 0), chunks: Number(rows[0]?.chunks ?? 0) };
      });
    },
  };
}
