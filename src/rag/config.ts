import { join } from "node:path";
import { ConfigError } from "../config.js";
import type { LogLevel } from "../log.js";

/**
 * Configuration of `traitgate rag-plugin`, from the environment only (docs/rag.md). Every
 * problem is collected, so a bad start reports all of them at once.
 */

export interface HnswConfig {
  /** RAG_HNSW_M: graph degree, fixed when the index is built (default 16). */
  m: number;
  /** RAG_HNSW_EF_CONSTRUCTION: build-time candidate list (default 64). */
  efConstruction: number;
  /** RAG_HNSW_EF_SEARCH: query-time candidate list, at least top_k (default 100). */
  efSearch: number;
  /** RAG_MAX_SCAN_TUPLES: how far an iterative scan may go before giving up (default 20000). */
  maxScanTuples: number;
  /**
   * RAG_EXACT_THRESHOLD: when the user may see at most this many chunks, they are ranked
   * exactly (no index) instead of through HNSW (default 2000).
   */
  exactThreshold: number;
}

export interface HttpEmbedderConfig {
  /** EMBEDDINGS_URL: an OpenAI-compatible endpoint (…/v1 or …/v1/embeddings). */
  url: string;
  /** EMBEDDINGS_MODEL */
  model: string;
  /** EMBEDDINGS_API_KEY: sent as a bearer token; never logged. */
  apiKey: string | undefined;
  /** EMBEDDINGS_TIMEOUT_MS (default 30000) per attempt. */
  timeoutMs: number;
  /** EMBEDDINGS_MAX_RETRIES (default 3) after the first attempt. */
  maxRetries: number;
  /** EMBEDDINGS_BATCH_SIZE (default 64) texts per request. */
  batchSize: number;
  /** EMBEDDINGS_SEND_DIMENSIONS: also send `dimensions` (text-embedding-3 models). */
  sendDimensions: boolean;
}

export interface RagConfig {
  port: number;
  host: string;
  dataDir: string;
  dbConnection: string | undefined;
  logLevel: LogLevel;
  tls: { certFile: string; keyFile: string } | undefined;
  maxBodyBytes: number;
  /** CORE_SECRET: the secret the core presents (`Bearer tgc_…`), printed at registration. */
  coreSecret: string;
  /** EMBEDDING_DIM: length of every embedding (default 1536, at most 2000 for HNSW). */
  dimension: number;
  /** RAG_TENANT: the tenant this process serves ("" = none). */
  tenant: string;
  hnsw: HnswConfig;
  /**
   * RAG_DEFER_INDEX: a bulk load is under way, so the HNSW index is not built at start (and
   * writes do not insert into a graph); the next start without it builds the index.
   */
  deferIndex: boolean;
  /** Unset: the local hashing embedder. */
  embeddings: HttpEmbedderConfig | undefined;
}

/** Where the plugin's embedded database lives: a folder of DATA_DIR, apart from the core's. */
export const ragDatabaseDir = (config: Pick<RagConfig, "dataDir">): string =>
  join(config.dataDir, "rag-pglite");

const logLevels: readonly LogLevel[] = ["debug", "info", "warn", "error", "silent"];

export function loadRagConfig(env: NodeJS.ProcessEnv): RagConfig {
  const problems: string[] = [];
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max) {
      problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
      return fallback;
    }
    return n;
  };

  const coreSecret = env.CORE_SECRET?.trim() ?? "";
  if (!/^tgc_[A-Za-z0-9_-]{32,}$/.test(coreSecret)) {
    problems.push(
      "CORE_SECRET must be the core secret printed when the plugin was registered (tgc_…)",
    );
  }
  const logLevel = (env.LOG_LEVEL?.trim().toLowerCase() || "info") as LogLevel;
  if (!logLevels.includes(logLevel)) {
    problems.push(`LOG_LEVEL must be one of ${logLevels.join(", ")} (got "${env.LOG_LEVEL}")`);
  }
  const certFile = env.TLS_CERT_FILE?.trim();
  const keyFile = env.TLS_KEY_FILE?.trim();
  if (Boolean(certFile) !== Boolean(keyFile)) {
    problems.push("TLS_CERT_FILE and TLS_KEY_FILE must be set together");
  }
  const tenant = env.RAG_TENANT?.trim() ?? "";
  if (tenant !== "" && !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/.test(tenant)) {
    problems.push("RAG_TENANT must be 1–63 letters, digits, '_', '.' or '-'");
  }
  const dbConnection = env.DB_CONNECTION?.trim() || undefined;
  if (dbConnection !== undefined && !/^postgres(ql)?:\/\//.test(dbConnection)) {
    problems.push("DB_CONNECTION must be a postgres:// or postgresql:// URL");
  }

  const hnsw: HnswConfig = {
    m: int("RAG_HNSW_M", 16, 2, 100),
    efConstruction: int("RAG_HNSW_EF_CONSTRUCTION", 64, 4, 1000),
    efSearch: int("RAG_HNSW_EF_SEARCH", 100, 1, 1000),
    maxScanTuples: int("RAG_MAX_SCAN_TUPLES", 20_000, 1, 100_000_000),
    exactThreshold: int("RAG_EXACT_THRESHOLD", 2000, 0, 10_000_000),
  };
  if (hnsw.efConstruction < 2 * hnsw.m) {
    problems.push("RAG_HNSW_EF_CONSTRUCTION must be at least twice RAG_HNSW_M");
  }

  const defer = env.RAG_DEFER_INDEX?.trim().toLowerCase() ?? "";
  if (!["", "true", "false", "1", "0"].includes(defer)) {
    problems.push("RAG_DEFER_INDEX must be true or false");
  }

  const url = env.EMBEDDINGS_URL?.trim();
  let embeddings: HttpEmbedderConfig | undefined;
  if (url) {
    if (!/^https?:\/\//.test(url)) problems.push("EMBEDDINGS_URL must be an http(s):// URL");
    // The API key must not travel in clear, except to this machine.
    const plainRemote =
      /^http:\/\//.test(url) &&
      !/^http:\/\/(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?(\/|$)/.test(url);
    if (plainRemote && env.EMBEDDINGS_API_KEY?.trim()) {
      problems.push(
        "EMBEDDINGS_URL must be https:// when EMBEDDINGS_API_KEY is set (or a loopback address)",
      );
    }
    const model = env.EMBEDDINGS_MODEL?.trim() ?? "";
    if (model === "") problems.push("EMBEDDINGS_MODEL must be set with EMBEDDINGS_URL");
    const send = env.EMBEDDINGS_SEND_DIMENSIONS?.trim().toLowerCase() ?? "";
    if (!["", "true", "false", "1", "0"].includes(send)) {
      problems.push("EMBEDDINGS_SEND_DIMENSIONS must be true or false");
    }
    embeddings = {
      url,
      model,
      apiKey: env.EMBEDDINGS_API_KEY?.trim() || undefined,
      timeoutMs: int("EMBEDDINGS_TIMEOUT_MS", 30_000, 100, 600_000),
      maxRetries: int("EMBEDDINGS_MAX_RETRIES", 3, 0, 10),
      batchSize: int("EMBEDDINGS_BATCH_SIZE", 64, 1, 2048),
      sendDimensions: send === "true" || send === "1",
    };
  } else if (env.EMBEDDINGS_MODEL?.trim() || env.EMBEDDINGS_API_KEY?.trim()) {
    problems.push("EMBEDDINGS_MODEL and EMBEDDINGS_API_KEY need EMBEDDINGS_URL");
  }

  const config: RagConfig = {
    port: int("PORT", 8080, 0, 65535),
    host: env.HOST?.trim() || "0.0.0.0",
    dataDir: env.DATA_DIR?.trim() || "./data",
    dbConnection,
    logLevel,
    tls: certFile && keyFile ? { certFile, keyFile } : undefined,
    // A batch of 1536-d vectors as JSON is ~30 KB per chunk.
    maxBodyBytes: int("MAX_BODY_BYTES", 16 * 1_048_576, 1024, 256 * 1_048_576),
    coreSecret,
    // pgvector's HNSW indexes `vector` columns of at most 2000 dimensions.
    dimension: int("EMBEDDING_DIM", 1536, 2, 2000),
    tenant,
    hnsw,
    deferIndex: defer === "true" || defer === "1",
    embeddings,
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}
