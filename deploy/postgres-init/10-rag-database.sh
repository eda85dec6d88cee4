#!/bin/sh
# Run once by the pgvector/pgvector image on an empty data volume (docker-entrypoint-initdb.d):
# the RAG plugin gets a role and a database of its own, apart from the core's, with the vector
# extension already created (creating it needs a superuser; the plugin's role is not one).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v rag_password="$RAG_DB_PASSWORD" <<'SQL'
CREATE ROLE rag LOGIN PASSWORD :'rag_password';
CREATE DATABASE rag OWNER rag;
\connect rag
CREATE EXTENSION vector;
SQL
