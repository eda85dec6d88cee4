import { PGlite } from "@electric-sql/pglite";
import { vector } from "@electric-sql/pglite-pgvector";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import { silentLogger } from "../../src/log.js";
import type { HnswConfig } from "../../src/rag/config.js";
import { prepareRagSchema } from "../../src/rag/schema.js";
import { type Database, openDatabase } from "../../src/storage/index.js";
import { pgliteTarget } from "../support/database.js";

export const testHnsw: HnswConfig = {
  m: 8,
  efConstruction: 32,
  efSearch: 64,
  maxScanTuples: 20_000,
  exactThreshold: 2000,
};

/** Where the RAG store suites run: embedded PGlite, and PGlite over the wire through `pg`. */
export interface RagTarget {
  name: string;
  open(): Promise<Database>;
}

export const ragTargets: RagTarget[] = [
  { name: "pglite", open: () => pgliteTarget.open() },
  { name: "pg over pglite-socket", open: openThroughSocket },
];

/** A PGlite served by pglite-socket, reached by the `pg` driver (one connection: PGlite is one session). */
async function openThroughSocket(): Promise<Database> {
  const pglite = await PGlite.create({ dataDir: "memory://", extensions: { vector } });
  const server = new PGLiteSocketServer({
    db: pglite,
    port: 0,
    host: "127.0.0.1",
    // The pool holds one at a time, but a discarded connection may still be closing.
    maxConnections: 4,
  });
  await server.start();
  const db = await openDatabase({
    connection: `postgres://postgres@${server.getServerConn()}/postgres`,
    poolSize: 1,
    log: silentLogger,
  });
  return {
    ...db,
    async close() {
      await db.close();
      await server.stop();
      await pglite.close();
    },
  };
}

export async function openRagDatabase(target: RagTarget, dimension: number): Promise<Database> {
  const db = await target.open();
  await prepareRagSchema(db, silentLogger, { dimension, hnsw: testHnsw });
  return db;
}

/** mulberry32: a small seeded PRNG, so every run draws the same cases. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/** Points around a few random centres: structure an ANN index can use, as real embeddings have. */
export function clusteredVectors(
  rand: () => number,
  count: number,
  dimension: number,
  clusters = 8,
  spread = 0.35,
): Float32Array[] {
  const centres = Array.from({ length: clusters }, () =>
    Float32Array.from({ length: dimension }, () => gaussian(rand)),
  );
  return Array.from({ length: count }, () => {
    const centre = centres[Math.floor(rand() * clusters)] ?? centres[0];
    return Float32Array.from(centre ?? [], (c) => c + spread * gaussian(rand));
  });
}

export function cosineDistance(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return 1 - dot / Math.sqrt(na * nb);
}

export interface Labelled {
  id: string;
  vector: Float32Array;
  requiredTraits: readonly string[];
}

/** The exact answer: allowed chunks by cosine distance, the first topK. */
export function exactTopK(
  chunks: readonly Labelled[],
  query: ArrayLike<number>,
  userTraits: readonly string[],
  topK: number,
): { id: string; distance: number }[] {
  const traits = new Set(userTraits);
  return chunks
    .filter((c) => c.requiredTraits.every((t) => traits.has(t)))
    .map((c) => ({ id: c.id, distance: cosineDistance(c.vector, query) }))
    .sort((a, b) => a.distance - b.distance)
    .slice(0, topK);
}
