import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChunkRecord, createRagStore, type RagStore } from "../../src/rag/store.js";
import type { Database, Executor, QueryResult } from "../../src/storage/index.js";
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

interface Seen {
  sql: string;
  params: readonly unknown[];
}

/**
 * The database, with every statement of a transaction recorded; `answer` may answer one
 * instead of the database (undefined: the database answers).
 */
function spying(
  db: Database,
  seen: Seen[],
  answer: (sql: string) => QueryResult<never> | undefined = () => undefined,
): Database {
  const wrap = (tx: Executor): Executor => ({
    exec: (script) => tx.exec(script),
    async query<R>(sql: string, params: readonly unknown[] = []) {
      seen.push({ sql, params });
      return (answer(sql) as QueryResult<R> | undefined) ?? tx.query<R>(sql, params);
    },
  });
  return { ...db, transaction: (fn) => db.transaction((tx) => fn(wrap(tx))) };
}

/** The stored chunks of a document: number, content, traits and embedding. */
async function storedChunks(db: Database, tenant: string, docId: string) {
  return db.transaction(async (tx) => {
    await tx.query("SELECT set_config('traitgate.rag_tenant', $1, true)", [tenant]);
    const { rows } = await tx.query<{
      chunk_no: number;
      content: string;
      required_traits: string[];
      embedding: number[];
    }>(
      `SELECT chunk_no, content, required_traits, embedding FROM rag_chunks
        WHERE tenant = $1 AND doc_id = $2 ORDER BY chunk_no`,
      [tenant, docId],
    );
    return rows;
  });
}

const chunksFrom = (vectors: Float32Array[], first = 0, label = "c"): ChunkRecord[] =>
  vectors.map((embedding, i) => ({
    chunkNo: first + i,
    content: `${label} ${first + i}`,
    embedding,
  }));

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
      { allowAccessChange: true },
    );
    const all = await store.search(d, 10, ["role:hr", "role:staff"]);
    expect(all.map((h) => [h.chunkNo, h.content, h.requiredTraits])).toEqual([
      [0, "second zero", ["role:hr"]],
    ]);
    expect(await store.search(d, 10, ["role:staff"])).toEqual([]);

    // One chunk: written over its number, the others kept and given the document's traits.
    await store.write(doc, [{ chunkNo: 3, content: "third", embedding: a }], "upsert", {
      allowAccessChange: true,
    });
    const after = await store.search(a, 10, ["role:staff"]);
    expect(after.map((h) => h.content).sort()).toEqual(["second zero", "third"]);
    expect(await store.stats()).toEqual({ documents: 1, chunks: 2 });

    expect(await store.delete("handbook")).toBe(2);
    expect(await store.delete("handbook")).toBeUndefined();
    expect(await store.stats()).toEqual({ documents: 0, chunks: 0 });
  });

  it("refuses a write that would change a document's required traits or classification, unless allowed", async () => {
    const store = createRagStore({ db, tenant: "t-access", hnsw: testHnsw });
    const [a, b] = clusteredVectors(random(5), 2, dim);
    if (!a || !b) throw new Error("vectors");
    const doc = {
      id: "notes",
      title: "Notes",
      path: "a/notes.md",
      requiredTraits: ["role:clinician", "data_access:internal"],
      classification: "internal",
    };
    await store.write(doc, [{ chunkNo: 0, content: "clinician notes", embedding: a }], "replace");
    // The same access in another order, with new content: no flag needed.
    await store.write(
      { ...doc, requiredTraits: ["data_access:internal", "role:clinician"] },
      [{ chunkNo: 0, content: "clinician notes, revised", embedding: a }],
      "replace",
    );
    for (const [change, mode] of [
      [{ requiredTraits: ["data_access:public"], classification: "public" }, "replace"],
      [{ requiredTraits: ["data_access:internal"] }, "replace"],
      [{ classification: "phi" }, "upsert"],
    ] as const) {
      const write = store.write(
        { ...doc, ...change },
        [{ chunkNo: 0, content: "public notes", embedding: b }],
        mode,
      );
      await expect(write).rejects.toMatchObject({
        kind: "already_exists",
        reason: "DOCUMENT_ACCESS_CHANGE",
        metadata: { doc_id: "notes" },
      });
    }
    // Nothing of the refused writes is there: still clinician-only, with its own text.
    expect(await store.search(b, 5, ["data_access:public"])).toEqual([]);
    const kept = await store.search(a, 5, ["role:clinician", "data_access:internal"]);
    expect(kept.map((h) => [h.content, h.classification])).toEqual([
      ["clinician notes, revised", "internal"],
    ]);
    await store.write(
      { ...doc, requiredTraits: ["data_access:public"], classification: "public" },
      [{ chunkNo: 0, content: "public notes", embedding: b }],
      "replace",
      { allowAccessChange: true },
    );
    expect((await store.search(b, 5, ["data_access:public"])).map((h) => h.content)).toEqual([
      "public notes",
    ]);
    await store.delete("notes");
  });

  it("writes several documents in one transaction; a refusal of one leaves none written", async () => {
    const store = createRagStore({ db, tenant: "t-many", hnsw: testHnsw });
    const [a, b, c] = clusteredVectors(random(9), 3, dim);
    if (!a || !b || !c) throw new Error("vectors");
    const doc = (id: string, requiredTraits: string[]) => ({
      id,
      title: id,
      path: `${id}.md`,
      requiredTraits,
      classification: "internal",
    });
    expect(
      await store.writeMany([
        {
          document: doc("one", ["role:staff"]),
          chunks: [{ chunkNo: 0, content: "one", embedding: a }],
        },
        {
          document: doc("two", ["role:staff"]),
          chunks: [
            { chunkNo: 0, content: "two zero", embedding: b },
            { chunkNo: 1, content: "two one", embedding: c },
          ],
        },
      ]),
    ).toEqual([1, 2]);
    expect(await store.stats()).toEqual({ documents: 2, chunks: 3 });
    // "three" is new, "two" would change access: refused, and "three" is not written either.
    const refused = store.writeMany([
      {
        document: doc("three", ["role:staff"]),
        chunks: [{ chunkNo: 0, content: "three", embedding: a }],
      },
      { document: doc("two", ["role:hr"]), chunks: [{ chunkNo: 0, content: "hr", embedding: b }] },
    ]);
    await expect(refused).rejects.toMatchObject({
      reason: "DOCUMENT_ACCESS_CHANGE",
      metadata: { doc_id: "two" },
    });
    expect(await store.stats()).toEqual({ documents: 2, chunks: 3 });
    expect((await store.search(b, 5, ["role:staff"])).map((h) => h.content).sort()).toEqual([
      "one",
      "two one",
      "two zero",
    ]);
    // Allowed, every document is replaced whole.
    expect(
      await store.writeMany(
        [
          {
            document: doc("two", ["role:hr"]),
            chunks: [{ chunkNo: 0, content: "hr", embedding: b }],
          },
        ],
        { allowAccessChange: true },
      ),
    ).toEqual([1]);
    expect((await store.search(b, 5, ["role:hr"])).map((h) => h.content)).toEqual(["hr"]);
    await store.delete("one");
    await store.delete("two");
  });

  describe("batched writes (binary vectors, one statement per batch)", () => {
    const doc = {
      id: "batched",
      title: "Batched",
      path: "b.md",
      requiredTraits: ["role:staff"],
      classification: "internal",
    };

    it("sends the vectors as one binary vector[] parameter per batch of insertBatch chunks", async () => {
      const seen: Seen[] = [];
      const store = createRagStore({
        db: spying(db, seen),
        tenant: "t-bin",
        hnsw: testHnsw,
        insertBatch: 3,
      });
      const vectors = clusteredVectors(random(21), 7, dim);
      await store.write(doc, chunksFrom(vectors), "replace");
      const writes = seen.filter((q) => /INSERT INTO rag_chunks/.test(q.sql));
      // ceil(7 / 3) statements; the first one also writes the document row.
      expect(writes).toHaveLength(3);
      expect(writes[0]?.sql).toMatch(/INSERT INTO rag_documents/);
      expect(writes.map((q) => (q.params[3] as number[]).length)).toEqual([3, 3, 1]);
      for (const q of writes) {
        expect(Buffer.isBuffer(q.params[5])).toBe(true);
        // No vector in text form anywhere (`[x,y,…]`).
        for (const p of q.params) {
          if (typeof p === "string") expect(p).not.toMatch(/^\[/);
          if (Array.isArray(p)) for (const e of p) expect(String(e)).not.toMatch(/^\[-?\d/);
        }
      }
      // The statements of one write: the tenant, the document's claim (a new one: created,
      // nothing to compare), the type id (first write only), the batches.
      expect(seen).toHaveLength(6);

      // Stored exactly: each value is its float4 rounding, on either driver.
      const stored = await storedChunks(db, "t-bin", "batched");
      expect(stored.map((r) => r.chunk_no)).toEqual([0, 1, 2, 3, 4, 5, 6]);
      stored.forEach((row, i) => {
        expect(row.embedding.map(Math.fround)).toEqual(Array.from(vectors[i] ?? []));
        expect(row.content).toBe(`c ${i}`);
        expect(row.required_traits).toEqual(["role:staff"]);
      });

      // The query vector goes the same way.
      seen.length = 0;
      const hits = await store.search(vectors[4] ?? [], 3, ["role:staff"]);
      expect(hits[0]?.chunkNo).toBe(4);
      expect(hits[0]?.distance).toBeLessThan(1e-6);
      const nearest = seen.filter((q) => /ORDER BY embedding <=>/.test(q.sql));
      expect(nearest.length).toBeGreaterThan(0);
      for (const q of nearest) expect(Buffer.isBuffer(q.params[1])).toBe(true);
      await store.delete("batched");
    });

    it("replaces a document of several batches whole, and upserts across batches", async () => {
      const store = createRagStore({ db, tenant: "t-batches", hnsw: testHnsw, insertBatch: 3 });
      const rand = random(22);
      await store.write(doc, chunksFrom(clusteredVectors(rand, 8, dim), 0, "old"), "replace");
      // Re-indexed with numbers 2..6: 0, 1 and 7 go, 2..6 are written over (two batches).
      const fresh = clusteredVectors(rand, 5, dim);
      await store.write(
        { ...doc, requiredTraits: ["role:hr"] },
        chunksFrom(fresh, 2, "new"),
        "replace",
        { allowAccessChange: true },
      );
      let stored = await storedChunks(db, "t-batches", "batched");
      expect(stored.map((r) => [r.chunk_no, r.content, r.required_traits])).toEqual(
        [2, 3, 4, 5, 6].map((n) => [n, `new ${n}`, ["role:hr"]]),
      );
      stored.forEach((row, i) => {
        expect(row.embedding.map(Math.fround)).toEqual(Array.from(fresh[i] ?? []));
      });

      // Upsert of 4 chunks (two batches) over 5..8: 2..4 kept, with the document's new traits.
      await store.write(
        { ...doc, requiredTraits: ["role:staff"] },
        chunksFrom(clusteredVectors(rand, 4, dim), 5, "up"),
        "upsert",
        { allowAccessChange: true },
      );
      stored = await storedChunks(db, "t-batches", "batched");
      expect(stored.map((r) => [r.chunk_no, r.content, r.required_traits])).toEqual([
        [2, "new 2", ["role:staff"]],
        [3, "new 3", ["role:staff"]],
        [4, "new 4", ["role:staff"]],
        [5, "up 5", ["role:staff"]],
        [6, "up 6", ["role:staff"]],
        [7, "up 7", ["role:staff"]],
        [8, "up 8", ["role:staff"]],
      ]);

      // A replace with no chunks keeps the document and removes its chunks.
      expect(await store.write(doc, [], "replace")).toBe(0);
      expect(await store.stats()).toEqual({ documents: 1, chunks: 0 });
      expect(await store.delete("batched")).toBe(0);
    });

    it("a failed write leaves nothing behind; bad vectors are refused by the database", async () => {
      const store = createRagStore({ db, tenant: "t-badvec", hnsw: testHnsw, insertBatch: 2 });
      const [a, b, c] = clusteredVectors(random(23), 3, dim);
      if (!a || !b || !c) throw new Error("vectors");
      const bad: [string, Float32Array | number[]][] = [
        ["another dimension", new Float32Array(dim - 1).fill(0.5)],
        ["NaN", Array.from(a, (x, i) => (i === 3 ? Number.NaN : x))],
        ["beyond float4", Array.from(a, (x, i) => (i === 3 ? 1e40 : x))],
      ];
      for (const [, vector] of bad) {
        // The bad vector is in the second batch: the first one is rolled back with it.
        await expect(
          store.write(
            doc,
            [
              { chunkNo: 0, content: "a", embedding: a },
              { chunkNo: 1, content: "b", embedding: b },
              { chunkNo: 2, content: "bad", embedding: vector },
            ],
            "replace",
          ),
        ).rejects.toThrow();
      }
      expect(await store.stats()).toEqual({ documents: 0, chunks: 0 });
      await store.write(doc, [{ chunkNo: 0, content: "c", embedding: c }], "replace");
      expect((await storedChunks(db, "t-badvec", "batched")).map((r) => r.content)).toEqual(["c"]);
      await store.delete("batched");
    });

    it("looks pgvector's type id up once per store, for its first vector", async () => {
      const seen: Seen[] = [];
      const store = createRagStore({ db: spying(db, seen), tenant: "t-oid", hnsw: testHnsw });
      const [v, w] = clusteredVectors(random(24), 2, dim);
      if (!v || !w) throw new Error("vectors");
      expect(await store.search(v, 1, ["role:staff"])).toEqual([]);
      await store.write(doc, [{ chunkNo: 0, content: "x", embedding: v }], "replace");
      await store.write(doc, [{ chunkNo: 1, content: "y", embedding: w }], "upsert");
      expect((await store.search(w, 1, ["role:staff"]))[0]?.content).toBe("y");
      expect(seen.filter((q) => q.sql.includes("'vector'::regtype"))).toHaveLength(1);
      await store.delete("batched");
    });
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
