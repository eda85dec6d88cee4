import type { Queryable } from "../storage/index.js";

/** Which documents were ingested into which backend, by content hash. */
export interface IngestRecord {
  docId: string;
  path: string;
  contentHash: string;
  chunks: number;
}

export interface IngestStore {
  find(backend: string, docId: string): Promise<IngestRecord | undefined>;
  record(backend: string, record: IngestRecord): Promise<void>;
}

export function createIngestStore(db: Queryable): IngestStore {
  return {
    async find(backend, docId) {
      const { rows } = await db.query<{
        doc_id: string;
        path: string;
        content_hash: string;
        chunks: number;
      }>(
        "SELECT doc_id, path, content_hash, chunks FROM ingested_documents WHERE backend = $1 AND doc_id = $2",
        [backend, docId],
      );
      const row = rows[0];
      return row
        ? { docId: row.doc_id, path: row.path, contentHash: row.content_hash, chunks: row.chunks }
        : undefined;
    },
    async record(backend, r) {
      await db.query(
        `INSERT INTO ingested_documents (backend, doc_id, path, content_hash, chunks)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (backend, doc_id) DO UPDATE
           SET path = EXCLUDED.path, content_hash = EXCLUDED.content_hash,
               chunks = EXCLUDED.chunks, ingested_at = now()`,
        [backend, r.docId, r.path, r.contentHash, r.chunks],
      );
    },
  };
}
