import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { startRagPlugin } from "../../src/rag/plugin.js";

/**
 * A bulk load with RAG_DEFER_INDEX (docs/rag.md, "Scaling"): the plugin starts without the
 * HNSW index and writes without it; the next start without the setting builds it, and the
 * documents are found the same before and after.
 */

const dir = mkdtempSync(join(tmpdir(), "traitgate-rag-defer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const start = (env: Record<string, string>) =>
  startRagPlugin({
    config: loadRagConfig({
      CORE_SECRET: `tgc_${"d".repeat(43)}`,
      EMBEDDING_DIM: "64",
      PORT: "0",
      HOST: "127.0.0.1",
      DATA_DIR: dir,
      ...env,
    }),
    log: silentLogger,
  });

const hasIndex = async (plugin: Awaited<ReturnType<typeof start>>) =>
  (
    await plugin.db.query(
      "SELECT 1 FROM pg_indexes WHERE indexname = 'rag_chunks_embedding_hnsw' AND schemaname = current_schema()",
    )
  ).rows.length === 1;

describe("RAG_DEFER_INDEX", () => {
  it("loads without the HNSW index; the next start builds it, with the same answers", async () => {
    expect(() => loadRagConfig({ CORE_SECRET: "x", RAG_DEFER_INDEX: "maybe" })).toThrow(
      /RAG_DEFER_INDEX/,
    );
    const bulk = await start({ RAG_DEFER_INDEX: "1" });
    let before: string[];
    try {
      expect(await hasIndex(bulk)).toBe(false);
      const topics = ["lactate sepsis", "parking level", "leave policy", "night rota"];
      await bulk.rag.indexBatch({
        classification: "internal",
        documents: Array.from({ length: 40 }, (_, d) => ({
          document: {
            id: `d${d}`,
            title: "",
            path: `d${d}.md`,
            requiredTraits: [d % 2 === 0 ? "role:a" : "role:b"],
            classification: "internal",
          },
          chunks: [0, 1].map((chunkNo) => ({
            chunkNo,
            content: `${topics[(d + chunkNo) % topics.length]} note ${d}`,
            vector: [],
          })),
        })),
      });
      expect(await bulk.rag.stats()).toEqual({ documents: 40, chunks: 80 });
      before = (
        await bulk.rag.query({ q: "sepsis lactate", vector: [], topK: 5, userTraits: ["role:a"] })
      ).map((h) => h.id);
      expect(before).toHaveLength(5);
    } finally {
      await bulk.close();
    }
    const live = await start({});
    try {
      expect(await hasIndex(live)).toBe(true);
      const after = await live.rag.query({
        q: "sepsis lactate",
        vector: [],
        topK: 5,
        userTraits: ["role:a"],
      });
      expect(after.map((h) => h.id)).toEqual(before);
      expect(after.every((h) => h.requiredTraits.includes("role:a"))).toBe(true);
    } finally {
      await live.close();
    }
  }, 120_000);
});
