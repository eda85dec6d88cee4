import type { Logger } from "../log.js";
import type { RagConfig } from "./config.js";
import { createHttpEmbedder } from "./http-embedder.js";
import { createLocalEmbedder } from "./local-embedder.js";

/**
 * Turns texts into embeddings of a fixed dimension, a batch at a time. Every vector has
 * `dimension` values; an embedder may return zero vectors for texts with nothing to embed
 * (the caller refuses those: cosine distance is undefined for them).
 */
export interface Embedder {
  /** "local-hash" or "openai:<model>": reported by Stats, never a secret. */
  readonly name: string;
  readonly dimension: number;
  /** One vector per text, in order. `signal` aborts remote calls. */
  embed(texts: readonly string[], signal?: AbortSignal): Promise<Float32Array[]>;
}

/** The embedder the configuration names: the HTTP client with EMBEDDINGS_URL, else the local one. */
export function createEmbedder(
  config: Pick<RagConfig, "dimension" | "embeddings">,
  log: Logger,
): Embedder {
  if (config.embeddings === undefined) return createLocalEmbedder({ dimension: config.dimension });
  return createHttpEmbedder({ ...config.embeddings, dimension: config.dimension, log });
}

/** Euclidean length; 0 for a zero vector. */
export function norm(vector: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < vector.length; i++) {
    const v = vector[i] ?? 0;
    sum += v * v;
  }
  return Math.sqrt(sum);
}
