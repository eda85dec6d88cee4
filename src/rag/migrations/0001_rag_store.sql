-- The RAG plugin's store (docs/rag.md). Applied with its own migrations table
-- (rag_schema_migrations), so a plugin database never gets the core's tables.
-- The embedding column is left without a dimension here: src/rag/schema.ts gives
-- it EMBEDDING_DIM on first start and builds the HNSW index, which needs one.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE rag_documents (
  -- '' when the process serves no particular tenant (RAG_TENANT unset).
  tenant          text NOT NULL DEFAULT '',
  id              text NOT NULL,
  title           text NOT NULL DEFAULT '',
  path            text NOT NULL DEFAULT '',
  required_traits text[] NOT NULL DEFAULT '{}',
  classification  text NOT NULL DEFAULT '',
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, id)
);
CREATE INDEX rag_documents_required_traits ON rag_documents USING gin (required_traits);

-- required_traits is the document's, copied onto each chunk (kept equal in the
-- transaction that writes the document), so the filter is a condition on the very
-- rows the HNSW index scan returns.
CREATE TABLE rag_chunks (
  tenant          text NOT NULL DEFAULT '',
  doc_id          text NOT NULL,
  chunk_no        integer NOT NULL CHECK (chunk_no >= 0),
  content         text NOT NULL,
  required_traits text[] NOT NULL DEFAULT '{}',
  embedding       vector NOT NULL,
  PRIMARY KEY (tenant, doc_id, chunk_no),
  FOREIGN KEY (tenant, doc_id) REFERENCES rag_documents (tenant, id) ON DELETE CASCADE
);
CREATE INDEX rag_chunks_required_traits ON rag_chunks USING gin (required_traits);

-- Row-level security by tenant: every transaction of the plugin sets
-- traitgate.rag_tenant (SET LOCAL); rows of other tenants are invisible and cannot
-- be written. FORCE applies it to the tables' owner too; superusers bypass it, so
-- run the plugin as an ordinary role for it to hold (the queries filter by tenant
-- as well).
ALTER TABLE rag_documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_documents FORCE ROW LEVEL SECURITY;
CREATE POLICY rag_documents_tenant ON rag_documents
  USING (tenant = coalesce(current_setting('traitgate.rag_tenant', true), ''))
  WITH CHECK (tenant = coalesce(current_setting('traitgate.rag_tenant', true), ''));

ALTER TABLE rag_chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_chunks FORCE ROW LEVEL SECURITY;
CREATE POLICY rag_chunks_tenant ON rag_chunks
  USING (tenant = coalesce(current_setting('traitgate.rag_tenant', true), ''))
  WITH CHECK (tenant = coalesce(current_setting('traitgate.rag_tenant', true), ''));
