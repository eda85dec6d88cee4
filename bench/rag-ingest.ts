import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "../src/log.js";
import { createLocalEmbedder } from "../src/rag/local-embedder.js";
import { buildVectorIndex, prepareRagSchema } from "../src/rag/schema.js";
import { createRagStore } from "../src/rag/store.js";
import { chunkText } from "../src/search/chunking.js";
import { runIngestCommand } from "../src/search/ingest-command.js";
import { openDatabase } from "../src/storage/index.js";
import { type Child, postJson, startChild, stopChild } from "./children.js";
import { processCpuMs } from "./load.js";

/**
 * Ingestion end to end (issue 17, target 5), against the plugin's store in the same run:
 *
 * - the public path: `traitgate ingest <dir>` (runIngestCommand, in this process) →
 *   `POST /api/rag/ingest` on a core (bench/rag-core.ts, its own process, PGlite) →
 *   the gateway as `ai-core` (allowlist, policy, `operator_call` audit) → `traitgate
 *   rag-plugin` (its own process, PGlite on disk, the local embedder) → its store;
 * - the store: the same chunks, embedded beforehand, written by `RagStore.write` per
 *   document into a PGlite database on disk of the same schema, in this process.
 *
 * Both run under the same index policy: "live", the HNSW index in place while writing (what
 * a plugin does between bulk loads); "bulk", the index dropped before the load and built
 * after it (pgvector's advice for bulk loads; docs/rag.md), the build counted in the rate.
 * CPU time per chunk of every party (client, core, plugin; the store's process) comes from
 * /proc over each load.
 */

export interface IngestRow {
  name: string;
  chunks: number;
  seconds: number;
  /** Seconds of the load alone, before the index build (bulk). */
  loadSeconds: number;
  cpuUsPerChunk: Record<string, number>;
}

const here = import.meta.dirname;
const root = join(here, "../..");
const cli = join(root, "dist/src/cli.js");

/** A Node.js child process of this benchmark (the core, the plugin), started as children.ts does. */
const startNode = (args: string[], env: NodeJS.ProcessEnv, ready: RegExp, timeoutMs = 120_000) =>
  startChild(process.execPath, args, env, ready, timeoutMs);

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

/**
 * Documents of `perDocument` paragraphs of ~700 characters (words of 64 topics, seeded): the
 * core's chunker makes one chunk of each paragraph (with the 200-character overlap).
 */
export function corpus(documents: number, perDocument: number): string[] {
  const rand = random(7);
  const syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "zu", "pa", "do"];
  const word = () =>
    Array.from(
      { length: 2 + Math.floor(rand() * 3) },
      () => syllables[Math.floor(rand() * syllables.length)],
    ).join("");
  const topics = Array.from({ length: 64 }, () => Array.from({ length: 40 }, word));
  const paragraph = () => {
    const topic = topics[Math.floor(rand() * topics.length)] ?? [];
    const words: string[] = [];
    let length = 0;
    while (length < 700) {
      const w = rand() < 0.7 ? (topic[Math.floor(rand() * topic.length)] ?? "") : word();
      words.push(w);
      length += w.length + 1;
    }
    return `${words.join(" ")}.`;
  };
  return Array.from({ length: documents }, () =>
    Array.from({ length: perDocument }, paragraph).join("\n\n"),
  );
}

type Policy = "live" | "bulk";

/** The store alone: the same chunks, embedded beforehand, a write per document. */
async function storeRun(
  dir: string,
  texts: readonly string[],
  dimension: number,
  policy: Policy,
  progress: (what: string) => void,
): Promise<IngestRow> {
  const embedder = createLocalEmbedder({ dimension });
  const documents = await Promise.all(
    texts.map(async (text, d) => {
      const chunks = chunkText(text);
      const vectors = await embedder.embed(chunks);
      return {
        id: `doc${d}`,
        chunks: chunks.map((content, chunkNo) => ({
          chunkNo,
          content,
          embedding: vectors[chunkNo] ?? [],
        })),
      };
    }),
  );
  const db = await openDatabase({ dataDir: join(dir, `store-${policy}`), log: silentLogger });
  try {
    const hnsw = { m: 16, efConstruction: 64, efSearch: 100, maxScanTuples: 20_000 };
    await prepareRagSchema(db, silentLogger, {
      dimension,
      hnsw,
      buildIndex: policy === "live",
    });
    const store = createRagStore({ db, tenant: "", hnsw: { ...hnsw, exactThreshold: 2000 } });
    const cpu0 = process.cpuUsage();
    const started = performance.now();
    let chunks = 0;
    for (const doc of documents) {
      chunks += await store.write(
        {
          id: doc.id,
          title: "",
          path: "",
          requiredTraits: ["data_access:public"],
          classification: "public",
        },
        doc.chunks,
        "replace",
      );
    }
    const loadSeconds = (performance.now() - started) / 1000;
    if (policy === "bulk") {
      await db.session((s) => s.transaction((tx) => buildVectorIndex(tx, hnsw, silentLogger)));
    }
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpu0);
    progress(
      `store (${policy}): ${chunks} chunks, load ${loadSeconds.toFixed(1)} s, in all ${seconds.toFixed(1)} s`,
    );
    return {
      name: "store",
      chunks,
      seconds,
      loadSeconds,
      cpuUsPerChunk: { store: (cpu.user + cpu.system) / chunks },
    };
  } finally {
    await db.close();
  }
}

/** Core and RAG plugin as docs/operator-lane.md sets them up, then `traitgate ingest`. */
async function publicRun(
  dir: string,
  corpusDir: string,
  dimension: number,
  policy: Policy,
  batch: boolean,
  progress: (what: string) => void,
): Promise<IngestRow> {
  const children: Child[] = [];
  const base = join(dir, `public-${policy}`);
  mkdirSync(base, { recursive: true });
  try {
    const nodeArgs = (process.env.BENCH_CORE_NODE_ARGS ?? "").split(" ").filter(Boolean);
    const core = await startNode(
      [...nodeArgs, join(here, "rag-core.js")],
      {
        PATH: process.env.PATH,
        DATA_DIR: join(base, "core"),
        JWT_SECRET: randomBytes(32).toString("base64url"),
        DATA_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: "warn",
        TOKEN_TTL_SECONDS: "86400",
      },
      /(\{"benchCore":true[^\n]*\})\n/,
    );
    children.push(core);
    const info = JSON.parse(core.match?.[1] ?? "{}") as {
      url: string;
      password: string;
      apiKey: string;
    };
    const url = info.url;
    const login = await postJson(
      url,
      "/auth/login",
      { username: "bench-admin", password: info.password },
      {},
    );
    const token = login.token as string;
    const admin = { authorization: `Bearer ${token}`, "x-api-key": info.apiKey };
    const manifest = {
      name: "RAG plugin",
      plugin_type: "retrieval",
      endpoints: {
        rag_index: "/rag/index",
        ...(batch ? { rag_index_batch: "/rag/index-batch" } : {}),
        rag_query: "/rag/query",
      },
    };
    const registered = await postJson(url, "/admin/plugins", { id: "rag", ...manifest }, admin);
    const coreSecret = (registered.credentials as { core_secret: string }).core_secret;
    const pluginArgs = (process.env.BENCH_PLUGIN_NODE_ARGS ?? "").split(" ").filter(Boolean);
    const plugin = await startNode(
      [...pluginArgs, cli, "rag-plugin"],
      {
        PATH: process.env.PATH,
        CORE_SECRET: coreSecret,
        PORT: "0",
        HOST: "127.0.0.1",
        DATA_DIR: join(base, "plugin"),
        EMBEDDING_DIM: String(dimension),
        LOG_LEVEL: "info",
        ...(policy === "bulk" ? { RAG_DEFER_INDEX: "1" } : {}),
      },
      /"url":"http:\/\/127\.0\.0\.1:(\d+)"[^\n]*traitgate rag-plugin listening/,
    );
    children.push(plugin);
    const pluginPort = Number(plugin.match?.[1]);
    await postJson(url, "/admin/plugins/rag", { ...manifest, port: pluginPort }, admin, "PUT");
    await postJson(
      url,
      "/api/admin/service-accounts",
      { name: "ai-core", roles: ["service"] },
      admin,
    );
    await postJson(
      url,
      "/admin/operator/allowlist",
      { caller: "ai-core", target: "rag", operations: Object.keys(manifest.endpoints) },
      admin,
      "PUT",
    );
    await postJson(
      url,
      "/api/admin/settings",
      { "rag.backend": "plugin", "rag.plugin_id": "rag" },
      admin,
    );

    const pids = { core: core.child.pid ?? -1, plugin: plugin.child.pid ?? -1 };
    /** CPU (ms) of plugin processes that have exited since the start. */
    let pluginBefore = 0;
    const cpuNow = () => {
      const self = process.cpuUsage();
      return {
        client: (self.user + self.system) / 1000,
        core: processCpuMs(pids.core),
        plugin: pluginBefore + processCpuMs(pids.plugin),
      };
    };
    const cpu0 = cpuNow();
    const started = performance.now();
    let summary = "";
    let errors = "";
    const code = await runIngestCommand(
      [corpusDir, "--required-traits", "none", "--classification", "public", "--url", url],
      {
        env: { TRAITGATE_TOKEN: token },
        err: {
          write: (text: string) => {
            errors = (errors + text).slice(-2000);
            return true;
          },
        },
        out: {
          write: (text: string) => {
            summary += text;
            return true;
          },
        },
      },
    );
    if (code !== 0) throw new Error(`traitgate ingest exited with ${code}: ${errors}`);
    const loadSeconds = (performance.now() - started) / 1000;
    progress(`public path (${policy}) loaded in ${loadSeconds.toFixed(1)} s: ${summary.trim()}`);
    if (policy === "bulk") {
      // Restarted without RAG_DEFER_INDEX, the plugin builds the index it deferred.
      pluginBefore += processCpuMs(pids.plugin);
      await stopChild(plugin, 30_000);
      children.pop();
      const again = await startNode(
        [...pluginArgs, cli, "rag-plugin"],
        {
          PATH: process.env.PATH,
          CORE_SECRET: coreSecret,
          PORT: String(pluginPort),
          HOST: "127.0.0.1",
          DATA_DIR: join(base, "plugin"),
          EMBEDDING_DIM: String(dimension),
          LOG_LEVEL: "info",
        },
        /traitgate rag-plugin listening/,
        // It builds the index before it listens: minutes at 50,000 × 1536.
        3_600_000,
      );
      children.push(again);
      // All of its CPU counts: the build is part of the load.
      pids.plugin = again.child.pid ?? -1;
    }
    const seconds = (performance.now() - started) / 1000;
    const cpu1 = cpuNow();
    const chunks = (JSON.parse(summary) as { chunks: number }).chunks;
    const per = (k: keyof typeof cpu0) => ((cpu1[k] - cpu0[k]) * 1000) / chunks;
    return {
      name: "public",
      chunks,
      seconds,
      loadSeconds,
      cpuUsPerChunk: { client: per("client"), core: per("core"), plugin: per("plugin") },
    };
  } finally {
    for (const c of children.reverse()) await stopChild(c, 30_000);
  }
}

/** The rows of the ingestion table: store and public path under each policy asked for. */
export async function benchIngest(options: {
  chunks: number;
  dimension: number;
  policies: readonly Policy[];
  /** The plugin declares rag_index_batch (default true); false: one call per document. */
  batch?: boolean;
  progress: (what: string) => void;
}): Promise<{ policy: Policy; store: IngestRow; public: IngestRow }[]> {
  const perDocument = 10;
  const texts = corpus(Math.ceil(options.chunks / perDocument), perDocument);
  const dir = mkdtempSync(join(tmpdir(), "traitgate-bench-ingest-"));
  try {
    const corpusDir = join(dir, "corpus");
    mkdirSync(corpusDir);
    texts.forEach((text, d) => {
      writeFileSync(join(corpusDir, `doc${String(d).padStart(6, "0")}.md`), text);
    });
    const out = [];
    for (const policy of options.policies) {
      options.progress(`ingest (${policy}): store`);
      const store = await storeRun(dir, texts, options.dimension, policy, options.progress);
      options.progress(`ingest (${policy}): public path`);
      const pub = await publicRun(
        dir,
        corpusDir,
        options.dimension,
        policy,
        options.batch ?? true,
        options.progress,
      );
      out.push({ policy, store, public: pub });
    }
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// `node dist/bench/rag-ingest.js`: this part alone (RAG_BENCH_CHUNKS, RAG_BENCH_DIM, RAG_INGEST_POLICIES).
if (process.argv[1] !== undefined && import.meta.url === `file://${process.argv[1]}`) {
  const rows = await benchIngest({
    chunks: Number(process.env.RAG_BENCH_CHUNKS ?? 2000),
    dimension: Number(process.env.RAG_BENCH_DIM ?? 1536),
    policies: (process.env.RAG_INGEST_POLICIES ?? "live").split(",") as Policy[],
    batch: process.env.RAG_INGEST_BATCH !== "0",
    progress: (what) => process.stderr.write(`${what}\n`),
  });
  for (const r of rows) {
    for (const row of [r.store, r.public]) {
      console.log(
        `${r.policy} ${row.name}: ${row.chunks} chunks, ${(row.chunks / row.seconds).toFixed(1)}/s (load ${(row.chunks / row.loadSeconds).toFixed(1)}/s) cpu µs/chunk ${JSON.stringify(Object.fromEntries(Object.entries(row.cpuUsPerChunk).map(([k, v]) => [k, Math.round(v)])))}`,
      );
    }
    console.log(`${r.policy} ratio ${(r.store.seconds / r.public.seconds).toFixed(2)}`);
  }
}
