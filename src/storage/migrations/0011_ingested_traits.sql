-- The core keeps its own copy of what each ingested document requires and how it is
-- classified, so that search checks a backend's results against what the core ingested
-- rather than against what the backend says (docs/rag.md).
ALTER TABLE ingested_documents
  ADD COLUMN required_traits text[] NOT NULL DEFAULT '{}',
  ADD COLUMN classification text NOT NULL DEFAULT '';
