import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "../log.js";
import { type Database, type Executor, migrate } from "../storage/index.js";
import type { HnswConfig } from "./config.js";

/** Table recording the plugin's migrations (never the core's schema_migrations). */
export const ragMigrationsTable = "rag_schema_migrations";

/** pg_advisory_xact_lock key while the dimension and the index are set up. */
const setupLockKey = 7_283_431_110n;

/** The store cannot be used on this database; the message says why and what to do. */
export class RagSetupError extends Error {
  override readonly name = "RagSetupError";
}

export interface RagSchemaOptions {
  dimension: number;
  hnsw: Pick<HnswConfig, "m" | "efConstruction">;
  /** Build the HNSW index now (default true); a bulk load builds it afterwards. */
  buildIndex?: boolean;
}

/**
 * Makes the database ready for the RAG store: checks that pgvector is there (PostgreSQL),
 * applies src/rag/migrations, gives the embedding column its dimension on first start
 * (refusing a different EMBEDDING_DIM later), and builds the HNSW index if missing.
 */
export async function prepareRagSchema(
  db: Database,
  log: Logger,
  options: RagSchemaOptions,
): Promise<void> {
  if (db.kind === "postgres") await checkPgvector(db);
  try {
    await migrate(db, log, { directory: ragMigrationsDirectory(), table: ragMigrationsTable });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    if (/extension "?vector"?|vector\.control/.test(message)) {
      throw new RagSetupError(missingVector("could not be created"), { cause: err });
    }
    throw err;
  }
  // In a session: building the index can take far longer than the statement timeout.
  await db.session((session) =>
    session.transaction(async (tx) => {
      await tx.query(`SELECT pg_advisory_xact_lock(${setupLockKey})`);
      await setDimension(tx, options.dimension);
      if (options.buildIndex !== false) await buildVectorIndex(tx, options.hnsw, log);
    }),
  );
}

/**
 * Creates the HNSW index (cosine) if it does not exist; the bench times this. Run it in a
 * session's transaction: on PostgreSQL only sessions may run longer than the statement timeout.
 */
export async function buildVectorIndex(
  tx: Executor,
  hnsw: Pick<HnswConfig, "m" | "efConstruction">,
  log: Logger,
): Promise<void> {
  const { rows } = await tx.query(
    "SELECT 1 FROM pg_indexes WHERE indexname = 'rag_chunks_embedding_hnsw' AND schemaname = current_schema()",
  );
  if (rows.length > 0) return;
  const started = performance.now();
  // Integers checked by the configuration; DDL takes no parameters.
  await tx.exec(`SET LOCAL statement_timeout = 0;
    SET LOCAL maintenance_work_mem = '256MB';
    CREATE INDEX rag_chunks_embedding_hnsw ON rag_chunks
      USING hnsw (embedding vector_cosine_ops)
      WITH (m = ${Math.trunc(hnsw.m)}, ef_construction = ${Math.trunc(hnsw.efConstruction)})`);
  log.info({ ms: Math.round(performance.now() - started), ...hnsw }, "HNSW index built");
}

async function setDimension(tx: Executor, dimension: number): Promise<void> {
  const { rows } = await tx.query<{ typmod: number }>(
    `SELECT atttypmod AS typmod FROM pg_attribute
      WHERE attrelid = 'rag_chunks'::regclass AND attname = 'embedding'`,
  );
  const current = Number(rows[0]?.typmod ?? -1);
  if (current === dimension) return;
  if (current > 0) {
    throw new RagSetupError(
      `the RAG store holds ${current}-dimension embeddings but EMBEDDING_DIM is ${dimension}: ` +
        `set EMBEDDING_DIM=${current}, or re-index into a new database to change the dimension`,
    );
  }
  await tx.exec(
    `ALTER TABLE rag_chunks ALTER COLUMN embedding TYPE vector(${Math.trunc(dimension)})`,
  );
}

async function checkPgvector(db: Database): Promise<void> {
  const { rows } = await db.query<{ installed: boolean; available: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') AS installed,
            EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS available`,
  );
  const row = rows[0];
  if (!(row?.installed || row?.available)) {
    throw new RagSetupError(missingVector("is not installed on this PostgreSQL server"));
  }
  // Queries rely on iterative index scans (hnsw.iterative_scan), new in pgvector 0.8.
  const version = await db.query<{ v: string | null }>(
    `SELECT coalesce(
       (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')) AS v`,
  );
  const v = version.rows[0]?.v ?? "";
  if (!pgvectorAtLeast(v, 0, 8)) {
    throw new RagSetupError(
      `pgvector ${v} is too old: the RAG plugin needs 0.8 or later (iterative index scans); ` +
        "upgrade it (ALTER EXTENSION vector UPDATE after installing the new version).",
    );
  }
}

/** Is a pgvector version string ("0.8.0") at least major.minor? */
export function pgvectorAtLeast(version: string, major: number, minor: number): boolean {
  const [a = Number.NaN, b = Number.NaN] = version.split(".").map(Number);
  return a > major || (a === major && b >= minor);
}

function missingVector(what: string): string {
  return [
    `the PostgreSQL extension "vector" (pgvector) ${what}; the RAG plugin stores embeddings with it.`,
    "Install pgvector on the database server (the postgresql-<version>-pgvector package from the",
    "PostgreSQL apt/yum repositories, the pgvector/pgvector Docker image, or a build from",
    "https://github.com/pgvector/pgvector), then run `CREATE EXTENSION vector;` as a superuser",
    "in this database. Or leave DB_CONNECTION unset to use the embedded database, which has it.",
  ].join("\n");
}

/** src/rag/migrations of this package, from the sources and from dist/ alike. */
export function ragMigrationsDirectory(): string {
  const start = dirname(fileURLToPath(import.meta.url));
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) return join(dir, "src", "rag", "migrations");
    if (dirname(dir) === dir) throw new Error(`no package.json above ${start}`);
  }
}
