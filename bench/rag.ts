import { pathToFileURL } from "node:url";
import { silentLogger } from "../src/log.js";
import { buildVectorIndex, prepareRagSchema } from "../src/rag/schema.js";
import { createRagStore, type SearchInfo, vectorLiteral } from "../src/rag/store.js";
import { openDatabase } from "../src/storage/index.js";

/**
 * The RAG store on embedded PGlite (pgvector 0.8), in one run: ingest (one row per INSERT
 * vs the store's multi-row writes), HNSW build time, and per filter selectivity (users who
 * may see 100 %, 30 %, 2 % and 0.1 % of the chunks) query p50/p99 and recall@10 against an
 * exact search, for (a) naive HNSW-then-filter (LIMIT 10 from the index, then the trait
 * filter) and (b) Traitgate's query (filter inside the ordered query, iterative scan,
 * exact path for small allowed sets).
 *
 * Data: clustered vectors (64 Gaussian clusters, seeded), not uniform noise, on which every
 * ANN index looks bad. Scale: RAG_BENCH_CHUNKS × RAG_BENCH_DIM (default 10,000 × 384, a few
 * minutes here); RAG_BENCH_FULL=1 runs the 50,000 × 1536 (PGlite builds that HNSW
 * index in many minutes). RAG_BENCH_QUERIES per selectivity (default 100).
 */

const full = process.env.RAG_BENCH_FULL === "1";
const chunkCount = Number(process.env.RAG_BENCH_CHUNKS ?? (full ? 50_000 : 10_000));
const dimension = Number(process.env.RAG_BENCH_DIM ?? (full ? 1536 : 384));
const queryCount = Number(process.env.RAG_BENCH_QUERIES ?? 100);
const singleRows = Math.min(1000, Math.floor(chunkCount / 10));
const perDocument = 10;
const hnsw = {
  m: 16,
  efConstruction: 64,
  efSearch: 100,
  maxScanTuples: 20_000,
  exactThreshold: 2000,
};

/** Users, each holding the traits that let them see a share of the chunks (nested tiers). */
const users = [
  { share: "100%", traits: ["t0", "t1", "t2", "t3"] },
  { share: "30%", traits: ["t0", "t1", "t2"] },
  { share: "2%", traits: ["t0", "t1"] },
  { share: "0.1%", traits: ["t0"] },
];
/** Chunk tier → the trait it requires: 0.1 % t0, 1.9 % t1, 28 % t2, the rest t3. */
const tierTrait = (u: number) => (u < 0.001 ? "t0" : u < 0.02 ? "t1" : u < 0.3 ? "t2" : "t3");

function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const gaussian = (rand: () => number) =>
  Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN;
}

const ms = (n: number) => n.toFixed(n < 10 ? 2 : 1);

export async function benchRag(): Promise<string> {
  const rand = random(42);
  const centres = Array.from({ length: 64 }, () =>
    Float32Array.from({ length: dimension }, () => gaussian(rand)),
  );
  const point = () => {
    const c = centres[Math.floor(rand() * centres.length)] ?? new Float32Array(dimension);
    return Float32Array.from(c, (x) => x + 0.6 * gaussian(rand));
  };
  const vectors = Array.from({ length: chunkCount }, point);
  // Documents take tiers from a low-discrepancy sequence, so the shares hold at any scale.
  const traits = Array.from({ length: Math.ceil(chunkCount / perDocument) }, (_, d) =>
    tierTrait((d * 0.618_033_988_75) % 1),
  );

  const db = await openDatabase({ dataDir: "memory://", log: silentLogger });
  try {
    await prepareRagSchema(db, silentLogger, { dimension, hnsw, buildIndex: false });
    const store = createRagStore({ db, tenant: "", hnsw });

    // Ingest without the index (as a bulk load would), one row per INSERT first.
    let started = performance.now();
    for (let i = 0; i < singleRows; i++) {
      const doc = `single${i}`;
      await db.query("INSERT INTO rag_documents (id, required_traits) VALUES ($1, $2::text[])", [
        doc,
        [traits[Math.floor(i / perDocument)] ?? "t3"],
      ]);
      await db.query(
        "INSERT INTO rag_chunks (doc_id, chunk_no, content, required_traits, embedding) VALUES ($1, 0, $2, $3::text[], $4::vector)",
        [
          doc,
          `chunk ${i}`,
          [traits[Math.floor(i / perDocument)] ?? "t3"],
          vectorLiteral(vectors[i] ?? []),
        ],
      );
    }
    const singleRate = singleRows / ((performance.now() - started) / 1000);
    started = performance.now();
    let batched = 0;
    for (let d = 0; d * perDocument < chunkCount; d++) {
      const from = Math.max(d * perDocument, singleRows);
      const to = (d + 1) * perDocument;
      if (from >= to) continue;
      const chunks = [];
      for (let i = from; i < to; i++) {
        chunks.push({
          chunkNo: i - d * perDocument,
          content: `chunk ${i}`,
          embedding: vectors[i] ?? [],
        });
      }
      batched += await store.write(
        {
          id: `doc${d}`,
          title: "",
          path: "",
          requiredTraits: [traits[d] ?? "t3"],
          classification: "",
        },
        chunks,
        "replace",
      );
    }
    const batchedRate = batched / ((performance.now() - started) / 1000);
    // The multi-row INSERT itself: one document of 1000 chunks (two statements of 500 rows).
    const bulk = createRagStore({ db, tenant: "bulk", hnsw });
    const bulkChunks = vectors
      .slice(0, 1000)
      .map((embedding, i) => ({ chunkNo: i, content: `chunk ${i}`, embedding }));
    started = performance.now();
    await bulk.write(
      { id: "bulk", title: "", path: "", requiredTraits: [], classification: "" },
      bulkChunks,
      "replace",
    );
    const bulkRate = bulkChunks.length / ((performance.now() - started) / 1000);
    await bulk.delete("bulk");

    started = performance.now();
    await db.transaction((tx) => buildVectorIndex(tx, hnsw, silentLogger));
    const buildSeconds = (performance.now() - started) / 1000;
    await db.exec("ANALYZE");

    const queries = Array.from({ length: queryCount }, point);
    const rows: string[] = [];
    for (const user of users) {
      const naive: number[] = [];
      const ours: number[] = [];
      let naiveRecall = 0;
      let oursRecall = 0;
      let oursFull = 0;
      let naiveFull = 0;
      const paths = new Map<string, number>();
      const counted = createRagStore({
        db,
        tenant: "",
        hnsw,
        onSearch: (info: SearchInfo) => paths.set(info.path, (paths.get(info.path) ?? 0) + 1),
      });
      for (const query of queries) {
        const literal = vectorLiteral(query);
        const truth = await db.transaction(async (tx) => {
          await tx.query("SELECT set_config('enable_indexscan', 'off', true)");
          const r = await tx.query<{ id: string }>(
            `SELECT doc_id || ':' || chunk_no AS id FROM rag_chunks WHERE required_traits <@ $2::text[]
              ORDER BY embedding <=> $1::vector LIMIT 10`,
            [literal, user.traits],
          );
          return new Set(r.rows.map((x) => x.id));
        });
        let t = performance.now();
        const naiveIds = await db.transaction(async (tx) => {
          await tx.query("SELECT set_config('hnsw.ef_search', '100', true)");
          const r = await tx.query<{ id: string }>(
            `SELECT id FROM (SELECT doc_id || ':' || chunk_no AS id, required_traits FROM rag_chunks
                ORDER BY embedding <=> $1::vector LIMIT 10) AS nearest
              WHERE required_traits <@ $2::text[]`,
            [literal, user.traits],
          );
          return r.rows.map((x) => x.id);
        });
        naive.push(performance.now() - t);
        t = performance.now();
        const hits = await counted.search(query, 10, user.traits);
        ours.push(performance.now() - t);
        const want = truth.size;
        const recall = (ids: string[]) =>
          want === 0 ? 1 : ids.filter((id) => truth.has(id)).length / want;
        naiveRecall += recall(naiveIds);
        oursRecall += recall(hits.map((h) => `${h.docId}:${h.chunkNo}`));
        if (naiveIds.length === want) naiveFull++;
        if (hits.length === want) oursFull++;
      }
      naive.sort((a, b) => a - b);
      ours.sort((a, b) => a - b);
      const pathText = [...paths].map(([p, n]) => `${p} ${n}`).join(", ");
      rows.push(
        `| ${user.share} | naive HNSW then filter | ${(naiveRecall / queryCount).toFixed(3)} | ${naiveFull}/${queryCount} | ${ms(percentile(naive, 0.5))} | ${ms(percentile(naive, 0.99))} | |`,
        `| ${user.share} | Traitgate | ${(oursRecall / queryCount).toFixed(3)} | ${oursFull}/${queryCount} | ${ms(percentile(ours, 0.5))} | ${ms(percentile(ours, 0.99))} | ${pathText} |`,
      );
    }

    return [
      `## RAG store (PGlite + pgvector, ${chunkCount.toLocaleString("en")} chunks × ${dimension} dims, clustered)`,
      "",
      "| ingest | chunks/s |",
      "|---|---:|",
      `| one row per INSERT (${singleRows} rows, with its document row) | ${Math.round(singleRate)} |`,
      `| store writes (documents of ${perDocument} chunks: a transaction and one multi-row INSERT each) | ${Math.round(batchedRate)} |`,
      `| store write of one document of 1000 chunks (multi-row INSERTs of 500) | ${Math.round(bulkRate)} |`,
      "",
      `HNSW build (m ${hnsw.m}, ef_construction ${hnsw.efConstruction}, cosine): ${buildSeconds.toFixed(1)} s`,
      "",
      `Queries: top 10, ${queryCount} per user, ef_search ${hnsw.efSearch}; recall@10 against an exact search of the allowed chunks; "full" = returned min(10, allowed).`,
      "",
      "| user sees | query | recall@10 | full | p50 ms | p99 ms | Traitgate path |",
      "|---|---|---:|---:|---:|---:|---|",
      ...rows,
    ].join("\n");
  } finally {
    await db.close();
  }
}

// `node dist/bench/rag.js`: this benchmark alone.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await benchRag());
}
