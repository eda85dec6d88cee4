import type { Queryable } from "../storage/index.js";

/** Which documents were ingested into which backend, by content hash. */
export interface IngestRecord {
  docId: string;
  path: string;
  contentHash: string;
  chunks: number;
  requiredTraits: string[];
  classification: string;
}

export interface IngestStore {
  find(backend: string, docId: string): Promise<IngestRecord | undefined>;
  /** The records of these documents in this backend, by document id (unknown ids absent). */
  findMany(backend: string, docIds: readonly string[]): Promise<Map<string, IngestRecord>>;
  record(backend: string, record: IngestRecord): Promise<void>;
  /** Records several documents in one statement. */
  recordMany(backend: string, records: readonly IngestRecord[]): Promise<void>;
}

interface Row {
  doc_id: string;
  path: string;
  content_hash: string;
  chunks: number;
  required_traits: string[];
  classification: string;
}

const toRecord = (row: Row): IngestRecord => ({
  docId: row.doc_id,
  path: row.path,
  contentHash: row.content_hash,
  chunks: row.chunks,
  requiredTraits: row.required_traits,
  classification: row.classification,
});

export function createIngestStore(db: Queryable): IngestStore {
  const findMany: IngestStore["findMany"] = async (backend, docIds) => {
    if (docIds.length === 0) return new Map();
    const { rows } = await db.query<Row>(
      `SELECT doc_id, path, content_hash, chunks, required_traits, classification
         FROM ingested_documents WHERE backend = $1 AND doc_id = ANY($2::text[])`,
      [backend, [...docIds]],
    );
    return new Map(rows.map((row) => [row.doc_id, toRecord(row)]));
  };
  const recordMany: IngestStore["recordMany"] = async (backend, records) => {
    if (records.length === 0) return;
    await db.query(
      `INSERT INTO ingested_documents
         (backend, doc_id, path, content_hash, chunks, required_traits, classification)
       SELECT $1, r.doc_id, r.path, r.content_hash, r.chunks,
              ARRAY(SELECT jsonb_array_elements_text(r.required_traits)), r.classification
         FROM jsonb_to_recordset($2::jsonb) AS r(doc_id text, path text, content_hash text,
              chunks int, required_traits jsonb, classification text)
       ON CONFLICT (backend, doc_id) DO UPDATE
         SET path = EXCLUDED.path, content_hash = EXCLUDED.content_hash,
             chunks = EXCLUDED.chunks, required_traits = EXCLUDED.required_traits,
             classification = EXCLUDED.classification, ingested_at = now()`,
      [
        backend,
        JSON.stringify(
          records.map((r) => ({
            doc_id: r.docId,
            path: r.path,
            content_hash: r.contentHash,
            chunks: r.chunks,
            required_traits: r.requiredTraits,
            classification: r.classification,
          })),
        ),
      ],
    );
  };
  return {
    recordMany,
    find: async (backend, docId) => (await findMany(backend, [docId])).get(docId),
    findMany,
    record: (backend, r) => recordMany(backend, [r]),
  };
}
