-- What the core has ingested into which RAG backend (docs/rag.md): re-ingesting a document
-- whose content, traits and classification are unchanged is skipped by its content hash.
-- `backend` is "builtin" or "plugin:<plugin id>".
CREATE TABLE ingested_documents (
  backend      text NOT NULL,
  doc_id       text NOT NULL,
  path         text NOT NULL,
  content_hash text NOT NULL,
  chunks       integer NOT NULL,
  ingested_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (backend, doc_id)
);
