import { pathToFileURL } from "node:url";
import { silentLogger } from "../src/log.js";
import { buildVectorIndex, prepareRagSchema } from "../src/rag/schema.js";
import {
  createRagStore,
  type SearchInfo,
  vectorArrayBinary,
  vectorLiteral,
} from "../src/rag/store.js";
import { openDatabase } from "../src/storage/index.js";
import { benchIngest, type IngestRow } from "./rag-ingest.js";

/**
 * The RAG store on embedded PGlite (pgvector 0.8), in one run:
 *
 * - Ingest, every way into the same schema state (no HNSW index yet, as a bulk load should be
 *   done): one row per INSERT, each statement its own transaction, with the vector as
 *   pgvector's text literal (what a client usually sends) and with the store's binary form;
 *   then the store's writes (a transaction per document: upsert it, replace its chunks with
 *   one INSERT … unnest of binary vectors per 500 chunks). Then the HNSW build, timed alone,
 *   and, after the queries, store writes into the indexed table (what a live plugin does).
 * - Per filter selectivity (users who may see 100 %, 30 %, 2 % and 0.1 % of the chunks)
 *   query p50/p99 and recall@10 against an exact search, for (a) naive HNSW-then-filter
 *   (LIMIT 10 from the index, then the trait filter) and (b) Traitgate's query (filter inside
 *   the ordered query, iterative scan, exact path for small allowed sets). Both get the query
 *   vector in the same (binary) form, so only the query shapes differ.
 *
 * Data: clustered vectors (64 Gaussian clusters, seeded), not uniform noise, on which every
 * ANN index looks bad; documents of 10 chunks. Scale: RAG_BENCH_CHUNKS × RAG_BENCH_DIM
 * (default 10,000 × 384, under a minute here); RAG_BENCH_FULL=1 runs the 50,000 × 1536
 * (about 5 minutes here, most of it the HNSW build).
 * RAG_BENCH_QUERIES per selectivity (default 100). Progress goes to standard error.
 *
 * Then ingestion end to end (bench/rag-ingest.ts): `traitgate ingest` → core → gateway → RAG
 * plugin against the plugin's store in the same run, under each index policy: "bulk" (index
 * deferred, built after the load; RAG_INGEST_CHUNKS, default the chunk count above) and "live"
 * (index in place; RAG_INGEST_LIVE_CHUNKS, default 2,000: every chunk is a graph insertion).
 * RAG_INGEST=0 leaves it out.
 */

const full = process.env.RAG_BENCH_FULL === "1";
const chunkCount = Number(process.env.RAG_BENCH_CHUNKS ?? (full ? 50_000 : 10_000));
const dimension = Number(process.env.RAG_BENCH_DIM ?? (full ? 1536 : 384));
const queryCount = Number(process.env.RAG_BENCH_QUERIES ?? 100);
const perDocument = 10;
const documentCount = Math.ceil(chunkCount / perDocument);
/** Documents loaded one row per INSERT, in each of the two encodings (1000 chunks each at 10k+). */
const singleDocuments = Math.min(100, Math.floor(documentCount / 10));
/** Documents written after the build, into the indexed table. */
const liveDocuments = Math.min(20, Math.floor(documentCount / 10));
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
// Reset when benchRag starts: as part of `npm run bench` the module loads with the others.
let began = performance.now();
const progress = (what: string) =>
  process.stderr.write(`rag bench ${((performance.now() - began) / 1000).toFixed(0)} s: ${what}\n`);

export async function benchRag(): Promise<string> {
  const startedAt = new Date();
  began = performance.now();
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
  const traits = Array.from({ length: documentCount }, (_, d) =>
    tierTrait((d * 0.618_033_988_75) % 1),
  );
  const chunksOf = (d: number) => {
    const chunks = [];
    for (let i = d * perDocument; i < Math.min((d + 1) * perDocument, chunkCount); i++) {
      chunks.push({
        chunkNo: i - d * perDocument,
        content: `chunk ${i}`,
        embedding: vectors[i] ?? [],
      });
    }
    return chunks;
  };
  const documentOf = (d: number, prefix = "doc") => ({
    id: `${prefix}${d}`,
    title: "",
    path: "",
    requiredTraits: [traits[d] ?? "t3"],
    classification: "",
  });

  const db = await openDatabase({ dataDir: "memory://", log: silentLogger });
  try {
    await prepareRagSchema(db, silentLogger, { dimension, hnsw, buildIndex: false });
    const store = createRagStore({ db, tenant: "", hnsw });
    const { rows: oidRows } = await db.query<{ oid: number }>(
      "SELECT 'vector'::regtype::oid AS oid",
    );
    const vectorOid = Number(oidRows[0]?.oid);
    progress(`${chunkCount} × ${dimension}: ingest`);

    // One row per INSERT, each statement on its own (autocommit), as a naive loader does:
    // the document row, then its chunks one by one. Text literal, then binary.
    const singleRow = async (
      from: number,
      to: number,
      vectorSql: string,
      encode: (v: Float32Array) => unknown,
    ) => {
      const started = performance.now();
      let rows = 0;
      for (let d = from; d < to; d++) {
        const doc = documentOf(d);
        await db.query("INSERT INTO rag_documents (id, required_traits) VALUES ($1, $2::text[])", [
          doc.id,
          doc.requiredTraits,
        ]);
        for (const chunk of chunksOf(d)) {
          await db.query(
            `INSERT INTO rag_chunks (doc_id, chunk_no, content, required_traits, embedding)
             VALUES ($1, $2, $3, $4::text[], ${vectorSql})`,
            [
              doc.id,
              chunk.chunkNo,
              chunk.content,
              doc.requiredTraits,
              encode(chunk.embedding as Float32Array),
            ],
          );
          rows++;
        }
      }
      return rows / ((performance.now() - started) / 1000);
    };
    const singleTextRate = await singleRow(0, singleDocuments, "$5::vector", vectorLiteral);
    const singleBinaryRate = await singleRow(
      singleDocuments,
      2 * singleDocuments,
      "($5::vector[])[1]",
      (v) => vectorArrayBinary(vectorOid, [v]),
    );
    progress("single-row inserts done; store writes");

    // The store's writes: one transaction per document of 10 chunks.
    let started = performance.now();
    let batched = 0;
    for (let d = 2 * singleDocuments; d < documentCount; d++) {
      batched += await store.write(documentOf(d), chunksOf(d), "replace");
    }
    const batchedRate = batched / ((performance.now() - started) / 1000);
    // One document of 1000 chunks: two INSERTs of 500 rows (another tenant, removed after).
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

    progress("HNSW build");
    started = performance.now();
    await db.session((s) => s.transaction((tx) => buildVectorIndex(tx, hnsw, silentLogger)));
    const buildSeconds = (performance.now() - started) / 1000;
    await db.exec("VACUUM ANALYZE");
    progress(`HNSW build ${buildSeconds.toFixed(1)} s; queries`);

    const queries = Array.from({ length: queryCount }, point);
    const rows: string[] = [];
    let oursP50Worst = 0;
    let oursRecallWorst = 1;
    let oursAlwaysFull = true;
    for (const user of users) {
      const naive: number[] = [];
      const ours: number[] = [];
      let naiveRecall = 0;
      let oursRecall = 0;
      let oursFull = 0;
      let naiveFull = 0;
      let allowedCount = 0;
      const paths = new Map<string, number>();
      const counted = createRagStore({
        db,
        tenant: "",
        hnsw,
        onSearch: (info: SearchInfo) => paths.set(info.path, (paths.get(info.path) ?? 0) + 1),
      });
      const { rows: allowedRows } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM rag_chunks WHERE required_traits <@ $1::text[]",
        [user.traits],
      );
      allowedCount = Number(allowedRows[0]?.n ?? 0);
      for (const query of queries) {
        const param = vectorArrayBinary(vectorOid, [query]);
        const truth = await db.transaction(async (tx) => {
          await tx.query("SELECT set_config('enable_indexscan', 'off', true)");
          const r = await tx.query<{ id: string }>(
            `SELECT doc_id || ':' || chunk_no AS id FROM rag_chunks WHERE required_traits <@ $2::text[]
              ORDER BY embedding <=> ($1::vector[])[1] LIMIT 10`,
            [param, user.traits],
          );
          return new Set(r.rows.map((x) => x.id));
        });
        let t = performance.now();
        const naiveIds = await db.transaction(async (tx) => {
          await tx.query("SELECT set_config('hnsw.ef_search', $1, true)", [String(hnsw.efSearch)]);
          const r = await tx.query<{ id: string }>(
            `SELECT id FROM (SELECT doc_id || ':' || chunk_no AS id, required_traits FROM rag_chunks
                ORDER BY embedding <=> ($1::vector[])[1] LIMIT 10) AS nearest
              WHERE required_traits <@ $2::text[]`,
            [vectorArrayBinary(vectorOid, [query]), user.traits],
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
      oursP50Worst = Math.max(oursP50Worst, percentile(ours, 0.5));
      oursRecallWorst = Math.min(oursRecallWorst, oursRecall / queryCount);
      oursAlwaysFull &&= oursFull === queryCount;
      const pathText = [...paths].map(([p, n]) => `${p} ${n}`).join(", ");
      const share = `${user.share} (${allowedCount.toLocaleString("en")})`;
      rows.push(
        `| ${share} | naive HNSW then filter | ${(naiveRecall / queryCount).toFixed(3)} | ${naiveFull}/${queryCount} | ${ms(percentile(naive, 0.5))} | ${ms(percentile(naive, 0.99))} | |`,
        `| ${share} | Traitgate | ${(oursRecall / queryCount).toFixed(3)} | ${oursFull}/${queryCount} | ${ms(percentile(ours, 0.5))} | ${ms(percentile(ours, 0.99))} | ${pathText} |`,
      );
      progress(`queries for ${user.share} done`);
    }

    // A live plugin writes into the indexed table: every chunk is also inserted into HNSW.
    started = performance.now();
    let live = 0;
    for (let d = 0; d < liveDocuments; d++) {
      live += await store.write(documentOf(d, "live"), chunksOf(d), "replace");
    }
    const liveRate = live / ((performance.now() - started) / 1000);
    progress("store benchmark done");
    const ingest = process.env.RAG_INGEST === "0" ? [] : await ingestRows(progress);
    progress("done");

    const rate = (n: number) => Math.round(n).toLocaleString("en");
    const met = (ok: boolean) => (ok ? "met" : "**missed**");
    return [
      `## RAG store (PGlite + pgvector, ${chunkCount.toLocaleString("en")} chunks × ${dimension} dims, clustered)`,
      "",
      `Run ${startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC, ${((performance.now() - began) / 1000).toFixed(0)} s in all.`,
      "",
      "| ingest (no HNSW index yet, same schema state) | chunks/s |",
      "|---|---:|",
      `| one row per INSERT, vector as text literal (${singleDocuments} documents: their row, then 10 chunk INSERTs; autocommit) | ${rate(singleTextRate)} |`,
      `| one row per INSERT, vector binary (the store's encoding; ${singleDocuments} documents likewise) | ${rate(singleBinaryRate)} |`,
      `| store writes, documents of ${perDocument} chunks (a transaction; one statement: document, old chunks, \`INSERT … unnest\`) | ${rate(batchedRate)} |`,
      `| store write of one document of 1000 chunks (two statements of 500 chunks) | ${rate(bulkRate)} |`,
      "",
      `Store writes vs one row per INSERT: **${(batchedRate / singleTextRate).toFixed(1)}×** the text-literal loader, ${(batchedRate / singleBinaryRate).toFixed(1)}× the binary one (1000-chunk document: ${(bulkRate / singleTextRate).toFixed(1)}× and ${(bulkRate / singleBinaryRate).toFixed(1)}×).`,
      "",
      `HNSW build after the load (m ${hnsw.m}, ef_construction ${hnsw.efConstruction}, cosine, maintenance_work_mem 256MB): ${buildSeconds.toFixed(1)} s.`,
      `Store writes into the indexed table (documents of ${perDocument}, ${live} chunks): ${rate(liveRate)} chunks/s.`,
      "",
      `Queries: top 10, ${queryCount} per user, ef_search ${hnsw.efSearch}, exact path up to ${hnsw.exactThreshold} allowed chunks; recall@10 against an exact search of the allowed chunks; "full" = returned min(10, allowed). User share (allowed chunks).`,
      "",
      "| user sees | query | recall@10 | full | p50 ms | p99 ms | Traitgate path |",
      "|---|---|---:|---:|---:|---:|---|",
      ...rows,
      "",
      ...ingest,
      "",
      `Targets: recall@10 ≥ 0.95 ${met(oursRecallWorst >= 0.95)} (worst ${oursRecallWorst.toFixed(3)}); min(10, allowed) always ${met(oursAlwaysFull)}; p50 ≤ 10 ms ${met(oursP50Worst <= 10)} (worst ${ms(oursP50Worst)} ms); batched ≥ 10× single-row ${met(batchedRate >= 10 * singleTextRate)} against the text loader, ${met(batchedRate >= 10 * singleBinaryRate)} against the binary one.`,
    ].join("\n");
  } finally {
    await db.close();
  }
}

/** The ingestion table: per index policy, the store and the public path, in one run. */
async function ingestRows(progress: (what: string) => void): Promise<string[]> {
  const bulkChunks = Number(process.env.RAG_INGEST_CHUNKS ?? chunkCount);
  const liveChunks = Number(process.env.RAG_INGEST_LIVE_CHUNKS ?? Math.min(2000, chunkCount));
  const runs = [
    ...(await benchIngest({ chunks: bulkChunks, dimension, policies: ["bulk"], progress })),
    ...(await benchIngest({ chunks: liveChunks, dimension, policies: ["live"], progress })),
  ];
  const n = (x: number) => Math.round(x).toLocaleString("en");
  const cpu = (row: IngestRow) =>
    Object.entries(row.cpuUsPerChunk)
      .map(([party, us]) => `${party} ${n(us)}`)
      .join(", ");
  const lines = [
    `## Ingestion end to end (${dimension} dims; local embedder; PGlite on disk)`,
    "",
    "| index policy | path | chunks | load chunks/s | chunks/s to searchable (load + build) | CPU µs per chunk |",
    "|---|---|---:|---:|---:|---|",
  ];
  const verdicts: string[] = [];
  for (const r of runs) {
    const label =
      r.policy === "bulk" ? "bulk: index deferred, built after" : "live: index in place";
    for (const row of [r.store, r.public]) {
      const path =
        row === r.store
          ? "store: `RagStore.write` per document of 10, vectors given"
          : "public: `traitgate ingest` → core → gateway → plugin (embeds)";
      lines.push(
        `| ${label} | ${path} | ${n(row.chunks)} | ${n(row.chunks / row.loadSeconds)} | ${n(row.chunks / row.seconds)} | ${cpu(row)} |`,
      );
    }
    const ratio = r.store.seconds / r.public.seconds;
    const loadRatio = r.store.loadSeconds / r.public.loadSeconds;
    const cpuStore = Object.values(r.store.cpuUsPerChunk).reduce((a, b) => a + b, 0);
    const cpuPublic = Object.values(r.public.cpuUsPerChunk).reduce((a, b) => a + b, 0);
    verdicts.push(
      `${r.policy}: public ÷ store **${ratio.toFixed(2)}×** to searchable (target ≥ 0.70 ${ratio >= 0.7 ? "met" : "**missed**"}), ${loadRatio.toFixed(2)}× for the load alone; CPU per chunk, store ÷ all parties of the public path, ${(cpuStore / cpuPublic).toFixed(2)}×`,
    );
  }
  return [...lines, "", ...verdicts.map((v) => `- ${v}`)];
}

// `node dist/bench/rag.js`: this benchmark alone.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await benchRag());
}
