import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRagStore, type RagStore } from "../../src/rag/store.js";
import type { Database } from "../../src/storage/index.js";
import {
  clusteredVectors,
  exactTopK,
  type Labelled,
  openRagDatabase,
  ragTargets,
  random,
  testHnsw,
} from "./support.js";

const dim = 24;

/** Writes `labelled` as documents of `perDoc` chunks (a document's chunks share its traits). */
async function load(store: RagStore, labelled: Labelled[], perDoc: number): Promise<void> {
  for (let start = 0; start < labelled.length; start += perDoc) {
    const chunks = labelled.slice(start, start + perDoc);
    const first = chunks[0];
    if (!first) continue;
    await store.write(
      {
        id: first.id.split(":")[0] ?? "",
        title: `title ${start}`,
        path: `docs/${start}.md`,
        requiredTraits: first.requiredTraits,
        classification: "internal",
      },
      chunks.map((c) => ({
        chunkNo: Number(c.id.split(":")[1]),
        content: `content ${c.id}`,
        embedding: c.vector,
      })),
      "replace",
    );
  }
}

/** Every result is allowed, and its distances are the exact top-k's, position by position. */
function expectExact(
  got: { docId: string; chunkNo: number; distance: number; requiredTraits: string[] }[],
  want: { id: string; distance: number }[],
  userTraits: readonly string[],
) {
  expect(got.length).toBe(want.length);
  const ids = got.map((h) => `${h.docId}:${h.chunkNo}`);
  expect(new Set(ids).size).toBe(ids.length);
  got.forEach((hit, i) => {
    for (const trait of hit.requiredTraits) expect(userTraits).toContain(trait);
    // Equal up to ties: the i-th result is as near as the i-th exact one.
    expect(Math.abs(hit.distance - (want[i]?.distance ?? Number.NaN))).toBeLessThan(1e-5);
  });
  // Where no two distances are that close, the ids and their order are the same.
  const distinct = want.every(
    (w, i) => i === 0 || Math.abs(w.distance - (want[i - 1]?.distance ?? 0)) > 1e-5,
  );
  if (distinct) expect(ids).toEqual(want.map((w) => w.id));
}

describe.each(ragTargets)("RAG store on $name", (target) => {
  let db: Database;
  beforeAll(async () => {
    db = await openRagDatabase(target, dim);
  });
  afterAll(async () => {
    await db?.close();
  });

  it("re-indexing a document replaces its chunks; one-chunk writes upsert", async () => {
    const store = createRagStore({ db, tenant: "t-reindex", hnsw: testHnsw });
    const rand = random(1);
    const [a, b, c, d] = clusteredVectors(rand, 4, dim);
    const doc = {
      id: "handbook",
      title: "Handbook",
      path: "hr/handbook.md",
      requiredTraits: ["role:staff"],
      classification: "internal",
    };
    if (!a || !b || !c || !d) throw new Error("vectors");
    await store.write(
      doc,
      [
        { chunkNo: 0, content: "first zero", embedding: a },
        { chunkNo: 1, content: "first one", embedding: b },
        { chunkNo: 2, content: "first two", embedding: c },
      ],
      "replace",
    );
    await store.write(
      { ...doc, requiredTraits: ["role:hr"] },
      [{ chunkNo: 0, content: "second zero", embedding: d }],
      "replace",
    );
    const all = await store.search(d, 10, ["role:hr", "role:staff"]);
    expect(all.map((h) => [h.chunkNo, h.content, h.requiredTraits])).toEqual([
      [0, "second zero", ["role:hr"]],
    ]);
    expect(await store.search(d, 10, ["role:staff"])).toEqual([]);

    // One chunk: written over its number, the others kept and given the document's traits.
    await store.write(doc, [{ chunkNo: 3, content: "third", embedding: a }], "upsert");
    const after = await store.search(a, 10, ["role:staff"]);
    expect(after.map((h) => h.content).sort()).toEqual(["second zero", "third"]);
    expect(await store.stats()).toEqual({ documents: 1, chunks: 2 });

    expect(await store.delete("handbook")).toBe(2);
    expect(await store.delete("handbook")).toBeUndefined();
    expect(await store.stats()).toEqual({ documents: 0, chunks: 0 });
  });

  it("tenants do not see each other's documents", async () => {
    const one = createRagStore({ db, tenant: "t-one", hnsw: testHnsw });
    const two = createRagStore({ db, tenant: "t-two", hnsw: testHnsw });
    const [v] = clusteredVectors(random(2), 1, dim);
    if (!v) throw new Error("vector");
    const doc = { id: "same-id", title: "", path: "", requiredTraits: [], classification: "" };
    await one.write(doc, [{ chunkNo: 0, content: "one's", embedding: v }], "replace");
    await two.write(doc, [{ chunkNo: 0, content: "two's", embedding: v }], "replace");
    expect((await one.search(v, 5, [])).map((h) => h.content)).toEqual(["one's"]);
    expect((await two.search(v, 5, [])).map((h) => h.content)).toEqual(["two's"]);
    await two.delete("same-id");
    expect((await one.search(v, 5, [])).map((h) => h.content)).toEqual(["one's"]);
  });

  describe("filtered nearest neighbours (property test, fixed seed)", () => {
    const traits = ["a", "b", "c", "d", "e", "f"];
    const rand = random(7);
    const vectors = clusteredVectors(rand, 480, dim);
    // 120 documents of 4 chunks; each requires 0–3 random traits.
    const labelled: Labelled[] = vectors.map((vector, i) => ({
      id: `doc${Math.floor(i / 4)}:${i % 4}`,
      vector,
      requiredTraits: [],
    }));
    for (let doc = 0; doc < 120; doc++) {
      const required = traits.filter(() => rand() < 0.3).slice(0, 3);
      for (let k = 0; k < 4; k++) {
        const l = labelled[doc * 4 + k];
        if (l) l.requiredTraits = required;
      }
    }
    const cases = Array.from({ length: 200 }, () => ({
      userTraits: traits.filter(() => rand() < 0.5),
      query: clusteredVectors(rand, 1, dim, 8, 1)[0] ?? new Float32Array(dim),
      topK: 1 + Math.floor(rand() * 20),
    }));

    beforeAll(async () => {
      await load(createRagStore({ db, tenant: "t-prop", hnsw: testHnsw }), labelled, 4);
    });

    it.each([
      ["exact path (allowed ≤ threshold)", { exactThreshold: 100_000 }],
      ["HNSW path with iterative scan", { exactThreshold: 0 }],
    ])("%s: allowed chunks only, equal to the exact top-k", async (_, overrides) => {
      const paths = new Set<string>();
      const store = createRagStore({
        db,
        tenant: "t-prop",
        hnsw: { ...testHnsw, ...overrides },
        onSearch: (info) => paths.add(info.allowed === 0 ? "none" : info.path),
      });
      for (const { userTraits, query, topK } of cases) {
        const got = await store.search(query, topK, userTraits);
        expectExact(got, exactTopK(labelled, query, userTraits, topK), userTraits);
      }
      paths.delete("none");
      expect(paths).toEqual(new Set([overrides.exactThreshold === 0 ? "hnsw" : "exact"]));
    });
  });

  it("a user allowed ~1% of the chunks still gets top_k, nearest first", async () => {
    const rand = random(11);
    const vectors = clusteredVectors(rand, 1000, dim);
    const labelled: Labelled[] = vectors.map((vector, i) => ({
      id: `sel${i}:0`,
      vector,
      requiredTraits: i % 100 === 7 ? ["rare"] : ["common"],
    }));
    await load(createRagStore({ db, tenant: "t-sel", hnsw: testHnsw }), labelled, 1);
    const queries = clusteredVectors(rand, 5, dim, 8, 1);
    for (const [overrides, path] of [
      // Through HNSW: the iterative scan must go on far past ef_search (64) to find 10.
      [{ exactThreshold: 0 }, "hnsw"],
      // 10 allowed ≤ the threshold: ranked exactly at once.
      [{}, "exact"],
    ] as const) {
      const paths: string[] = [];
      const store = createRagStore({
        db,
        tenant: "t-sel",
        hnsw: { ...testHnsw, ...overrides },
        onSearch: (info) => paths.push(info.path),
      });
      for (const query of queries) {
        const got = await store.search(query, 10, ["rare"]);
        expectExact(got, exactTopK(labelled, query, ["rare"], 10), ["rare"]);
        expect(got).toHaveLength(10);
      }
      expect(new Set(paths)).toEqual(new Set([path]));
      // More than there are: all 10 allowed.
      expect(await store.search(queries[0] ?? [], 50, ["rare"])).toHaveLength(10);
      expect(await store.search(queries[0] ?? [], 5, [])).toEqual([]);
    }
  });
});
