import type { Database, Executor } from "../storage/index.js";
import { accessChangeRefused, sameAccess } from "./access-change.js";
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
   * Upserts the document and writes its chunks in one transaction: "replace" leaves the
   * document with exactly these chunks (its others deleted; a re-index never leaves a mix);
   * "upsert" writes these chunks over the same numbers and keeps the others, which take the
   * document's required traits. Chunk numbers must be distinct. Returns the chunks written.
   * A document stored with other required traits or classification is refused
   * (DOCUMENT_ACCESS_CHANGE, src/rag/access-change.ts) unless `allowAccessChange`.
   */
  write(
    document: DocumentRecord,
    chunks: readonly ChunkRecord[],
    mode: "replace" | "upsert",
    options?: { allowAccessChange?: boolean },
  ): Promise<number>;
  /**
   * Several documents, each written as `write` with "replace" does, all in one transaction
   * (bulk ingestion): a refusal or a failure of any leaves none of them written. Returns
   * the chunks written per document, in order. Document ids must be distinct.
   */
  writeMany(
    documents: readonly { document: DocumentRecord; chunks: readonly ChunkRecord[] }[],
    options?: { allowAccessChange?: boolean },
  ): Promise<number[]>;
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
  /** Chunks per statement, their vectors in one binary parameter (default 500). */
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

/**
 * A vector as pgvector's text input, `[x,y,…]` (a parameter cast to ::vector). The store
 * sends binary vectors instead (vectorArrayBinary); the benchmark uses this as the baseline.
 */
export const vectorLiteral = (vector: ArrayLike<number>): string =>
  `[${Array.prototype.join.call(vector, ",")}]`;

/**
 * Vectors as one `vector[]` parameter in PostgreSQL's binary array format (array_recv):
 * int32 dimensions (1), int32 flags (0), element type oid, int32 length, int32 lower bound
 * (1); then per element its int32 byte length and pgvector's binary form (vector_recv):
 * int16 dimension, int16 0, float4 values; all big-endian. A Buffer parameter is sent in
 * binary format by both drivers (pg and PGlite), so the database copies floats instead of
 * parsing ~20 characters of text per value. Values are rounded to float4 here; NaN and
 * infinities (also from values beyond float4) reach pgvector, which refuses them.
 */
export function vectorArrayBinary(
  elementOid: number,
  vectors: readonly ArrayLike<number>[],
): Buffer {
  let size = 20;
  for (const v of vectors) size += 8 + 4 * v.length;
  const buf = Buffer.allocUnsafe(size);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  view.setInt32(0, 1);
  view.setInt32(4, 0);
  view.setUint32(8, elementOid);
  view.setInt32(12, vectors.length);
  view.setInt32(16, 1);
  let at = 20;
  for (const v of vectors) {
    const n = v.length;
    // pgvector's own limit is 16,000; beyond int16 the header could not say it.
    if (n > 16_000) throw new RangeError(`a vector of ${n} dimensions (at most 16000)`);
    view.setInt32(at, 4 + 4 * n);
    view.setInt16(at + 4, n);
    view.setInt16(at + 6, 0);
    at += 8;
    for (let i = 0; i < n; i++, at += 4) view.setFloat32(at, v[i] as number);
  }
  return buf;
}

// Statements are built once; only parameters change per call.
const setTenant = "SELECT set_config('traitgate.rag_tenant', $1, true)";

/**
 * pgvector's type id in this database, the element type named in the binary `vector[]`
 * parameter. Recent PostgreSQL versions check that id only for built-in types; it is looked
 * up (once per store) so that a server that does check it gets the right one.
 */
const vectorTypeOid = "SELECT 'vector'::regtype::oid AS oid";

// Chunks are written by one statement per batch of up to insertBatch; the embeddings are
// one binary vector[] parameter (vectorArrayBinary), not text: no float parsing, a quarter
// of the bytes. $1 tenant, $2 document id, $3 its required traits, $4 chunk numbers,
// $5 contents, $6 embeddings. A chunk number already there is written over.
const upsertChunks = `
  INSERT INTO rag_chunks (tenant, doc_id, chunk_no, content, required_traits, embedding)
  SELECT $1, $2, t.chunk_no, t.content, $3::text[], t.embedding
    FROM unnest($4::int[], $5::text[], $6::vector[]) AS t(chunk_no, content, embedding)
  ON CONFLICT (tenant, doc_id, chunk_no) DO UPDATE SET
    content = excluded.content, required_traits = excluded.required_traits,
    embedding = excluded.embedding`;

/**
 * A document's write, in one statement with its first batch of chunks: upsert the document
 * ($7 title, $8 path, $9 classification), deal with its chunks whose numbers are not among
 * those written ($10, all batches'), and write the batch. The CTE and the INSERT touch
 * disjoint rows (numbers not in $10 / in $10), which is what makes one statement safe; the
 * chunks' foreign key is checked at the end of the statement, when the document row is there.
 */
const documentStatement = (others: string) => `
  WITH document AS (
    INSERT INTO rag_documents (tenant, id, title, path, required_traits, classification)
    VALUES ($1, $2, $7, $8, $3::text[], $9)
    ON CONFLICT (tenant, id) DO UPDATE SET
      title = excluded.title, path = excluded.path, required_traits = excluded.required_traits,
      classification = excluded.classification, updated_at = now()
  ), others AS (${others})
  ${upsertChunks}`;
/** "replace": the document's other chunks go. */
const replaceDocument = documentStatement(`
    DELETE FROM rag_chunks WHERE tenant = $1 AND doc_id = $2 AND chunk_no <> ALL ($10::int[])`);
/** "upsert": its other chunks stay, and take its (possibly new) required traits. */
const upsertDocument = documentStatement(`
    UPDATE rag_chunks SET required_traits = $3::text[]
     WHERE tenant = $1 AND doc_id = $2 AND chunk_no <> ALL ($10::int[])
       AND required_traits IS DISTINCT FROM $3::text[]`);

/**
 * Before a write: the document row is created if it is new (a concurrent first write of the
 * same id waits on it, then finds it), else read and locked, so that the access check and the
 * write see the same row. $3 title, $4 path, $5 required traits, $6 classification.
 */
const claimDocument = `
  INSERT INTO rag_documents (tenant, id, title, path, required_traits, classification)
  VALUES ($1, $2, $3, $4, $5::text[], $6)
  ON CONFLICT (tenant, id) DO NOTHING`;
const lockDocument = `
  SELECT required_traits, classification FROM rag_documents
   WHERE tenant = $1 AND id = $2 FOR UPDATE`;

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

/** The query vector comes as a one-element binary vector[] ($2), like the chunks' vectors. */
const nearest = `
  WITH nearest AS MATERIALIZED (
    SELECT doc_id, chunk_no, content, embedding <=> ($2::vector[])[1] AS distance
      FROM rag_chunks
     WHERE tenant = $1 AND required_traits <@ $3::text[]
     ORDER BY embedding <=> ($2::vector[])[1]
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
  /** pgvector's type id, looked up by the first call that sends a vector. */
  let vectorOid: number | undefined;
  async function typeOid(tx: Executor): Promise<number> {
    if (vectorOid === undefined) {
      const { rows } = await tx.query<{ oid: number | string }>(vectorTypeOid);
      vectorOid = Number(rows[0]?.oid);
    }
    return vectorOid;
  }

  /** Creates the document row if new; else refuses an access change not asked for. */
  async function claim(tx: Executor, document: DocumentRecord, allowAccessChange: boolean) {
    const created = await tx.query(claimDocument, [
      tenant,
      document.id,
      document.title,
      document.path,
      document.requiredTraits,
      document.classification,
    ]);
    if (created.rowCount > 0 || allowAccessChange) return;
    const { rows } = await tx.query<{ required_traits: string[]; classification: string }>(
      lockDocument,
      [tenant, document.id],
    );
    const stored = rows[0];
    if (
      stored &&
      !sameAccess(document, {
        requiredTraits: stored.required_traits,
        classification: stored.classification,
      })
    ) {
      throw accessChangeRefused(document.id, `document ${document.id}`);
    }
  }

  /** One document's write inside the caller's transaction (the tenant already set). */
  async function writeDocument(
    tx: Executor,
    document: DocumentRecord,
    chunks: readonly ChunkRecord[],
    mode: "replace" | "upsert",
    allowAccessChange: boolean,
  ): Promise<number> {
    await claim(tx, document, allowAccessChange);
    const oid = await typeOid(tx);
    const numbers = chunks.map((c) => c.chunkNo);
    // The first batch goes with the document (also when there are no chunks: the document
    // row is written, and on "replace" its chunks removed); the others after it.
    for (let start = 0; start === 0 || start < chunks.length; start += insertBatch) {
      const slice = chunks.slice(start, start + insertBatch);
      const batch = [
        tenant,
        document.id,
        document.requiredTraits,
        numbers.slice(start, start + insertBatch),
        slice.map((c) => c.content),
        vectorArrayBinary(
          oid,
          slice.map((c) => c.embedding),
        ),
      ];
      if (start > 0) {
        await tx.query(upsertChunks, batch);
        continue;
      }
      await tx.query(mode === "replace" ? replaceDocument : upsertDocument, [
        ...batch,
        document.title,
        document.path,
        document.classification,
        numbers,
      ]);
    }
    return chunks.length;
  }

  const writeInTransaction: RagStore["write"] = (document, chunks, mode, options = {}) =>
    db.transaction(async (tx) => {
      await tx.query(setTenant, [tenant]);
      return writeDocument(tx, document, chunks, mode, options.allowAccessChange === true);
    });

  const writeMany: RagStore["writeMany"] = (documents, options = {}) =>
    db.transaction(async (tx) => {
      await tx.query(setTenant, [tenant]);
      const written: number[] = [];
      for (const { document, chunks } of documents) {
        written.push(
          await writeDocument(tx, document, chunks, "replace", options.allowAccessChange === true),
        );
      }
      return written;
    });

  const rank = async (tx: Executor, vector: Buffer, topK: number, traits: readonly string[]) =>
    (await tx.query<HitRow>(nearest, [tenant, vector, traits, topK])).rows;

  return {
    write: writeInTransaction,
    writeMany,

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
      const { rows, path, allowed } = await db.transaction(async (tx) => {
        const query = vectorArrayBinary(await typeOid(tx), [vector]);
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
          const found = await rank(tx, query, topK, userTraits);
          // Enough, unless the iterative scan gave up (max_scan_tuples) first.
          if (found.length >= Math.min(topK, allowed)) {
            return { rows: found, path: "hnsw" as const, allowed };
          }
          await tx.query(exactScan);
          return {
            rows: await rank(tx, query, topK, userTraits),
            path: "hnsw+exact" as const,
            allowed,
          };
        }
        // Few allowed chunks: rank them all, without the vector index.
        await tx.query(exactScan);
        return { rows: await rank(tx, query, topK, userTraits), path: "exact" as const, allowed };
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
