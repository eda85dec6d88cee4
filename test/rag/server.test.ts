import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RagPluginService } from "../../gen/traitgate/rag/v1/rag_pb.js";
import { silentLogger } from "../../src/log.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { createLocalEmbedder } from "../../src/rag/local-embedder.js";
import { type RagPlugin, startRagPlugin } from "../../src/rag/plugin.js";
import { pgliteTarget } from "../support/database.js";
import { testHnsw } from "./support.js";

const secret = `tgc_${"s".repeat(43)}`;
const dim = 64;
let plugin: RagPlugin;
let url: string;

beforeAll(async () => {
  const config = {
    ...loadRagConfig({
      CORE_SECRET: secret,
      EMBEDDING_DIM: String(dim),
      PORT: "0",
      HOST: "127.0.0.1",
    }),
    hnsw: testHnsw,
  };
  plugin = await startRagPlugin({ config, log: silentLogger, db: await pgliteTarget.open() });
  url = plugin.server.url;
});
afterAll(async () => {
  await plugin?.close();
});

async function post(path: string, body: unknown, authorization = `Bearer ${secret}`) {
  const res = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The ErrorInfo detail of a REST error body (`{code, message, details}`). */
const reasonOf = (body: Record<string, unknown>) =>
  (body.details as { reason?: string; metadata?: Record<string, string> }[] | undefined)?.find(
    (d) => d.reason !== undefined,
  );

describe("RAG plugin over REST", () => {
  it("indexes one chunk and whole documents; a re-index replaces the chunks", async () => {
    const one = await post("/rag/index", {
      id: "leave-policy:0",
      title: "Leave policy",
      path: "hr/leave.md",
      content: "Employees accrue annual leave every month.",
      required_traits: ["role:staff"],
      classification: "internal",
    });
    expect(one).toEqual({ status: 200, body: { ok: true, doc_id: "leave-policy", chunks: 1 } });

    const doc = (chunks: string[]) => ({
      document: {
        id: "dosage",
        title: "Dosage guide",
        path: "clinical/dosage.md",
        required_traits: ["role:clinician"],
        classification: "phi",
      },
      chunks: chunks.map((content, chunk_no) => ({ chunk_no, content })),
    });
    expect(
      (await post("/rag/index", doc(["old paracetamol text", "old ibuprofen text"]))).body,
    ).toEqual({ ok: true, doc_id: "dosage", chunks: 2 });
    expect((await post("/rag/index", doc(["paracetamol dosage for adults"]))).body).toEqual({
      ok: true,
      doc_id: "dosage",
      chunks: 1,
    });

    const clinician = await post("/rag/query", {
      q: "paracetamol dosage",
      top_k: 10,
      user_traits: ["role:clinician", "role:staff"],
    });
    expect(clinician.status).toBe(200);
    const items = clinician.body.items as Record<string, unknown>[];
    expect(items.map((i) => i.id)).toEqual(["dosage:0", "leave-policy:0"]);
    expect(items[0]).toMatchObject({
      doc_id: "dosage",
      chunk_no: 0,
      title: "Dosage guide",
      path: "clinical/dosage.md",
      content: "paracetamol dosage for adults",
      required_traits: ["role:clinician"],
      classification: "phi",
    });
    const score = items[0]?.score as number;
    expect(score).toBeGreaterThan(0.3);
    expect(score).toBeLessThanOrEqual(1);

    const staff = await post("/rag/query", {
      q: "paracetamol dosage",
      user_traits: ["role:staff"],
    });
    expect((staff.body.items as { id: string }[]).map((i) => i.id)).toEqual(["leave-policy:0"]);
    expect((await post("/rag/query", { q: "paracetamol", user_traits: [] })).body).toEqual({
      items: [],
    });
  });

  it("q and vector give the same result for the same embedding", async () => {
    const [vector] = await createLocalEmbedder({ dimension: dim }).embed(["annual leave"]);
    const byQ = await post("/rag/query", { q: "annual leave", user_traits: ["role:staff"] });
    const byVector = await post("/rag/query", {
      vector: Array.from(vector ?? []),
      user_traits: ["role:staff"],
    });
    expect(byQ.status).toBe(200);
    expect(byVector.body).toEqual(byQ.body);
    expect((byQ.body.items as unknown[]).length).toBe(1);
  });

  it.each([
    ["neither q nor vector", { user_traits: [] }, "QUERY_INPUT", "q"],
    ["both q and vector", { q: "x", vector: Array(dim).fill(0.1) }, "QUERY_INPUT", "q"],
    ["a vector of the wrong dimension", { vector: [0.1, 0.2, 0.3] }, "VECTOR_DIMENSION", "vector"],
    ["a zero vector", { vector: Array(dim).fill(0) }, "ZERO_VECTOR", "vector"],
    ["top_k above 100", { q: "leave", top_k: 101 }, "INVALID_FIELD", "top_k"],
    ["a negative top_k", { q: "leave", top_k: -1 }, "INVALID_FIELD", "top_k"],
  ])("query with %s is 400", async (_, body, reason, field) => {
    const res = await post("/rag/query", body);
    expect(res.status).toBe(400);
    expect(res.body.code).toBe("invalid_argument");
    expect(reasonOf(res.body)?.reason).toBe(reason);
    expect(reasonOf(res.body)?.metadata?.field).toBe(field);
  });

  it.each([
    ["an id without a chunk number", { id: "doc", content: "x" }, "CHUNK_ID", "id"],
    ["no content", { id: "doc:0" }, "INVALID_FIELD", "content"],
    [
      "a vector of the wrong dimension",
      { id: "doc:0", content: "x", vector: [1, 2] },
      "VECTOR_DIMENSION",
      "vector",
    ],
    [
      "both forms at once",
      { id: "doc:0", document: { id: "doc" }, chunks: [] },
      "INDEX_SHAPE",
      "id",
    ],
    [
      "chunks without a document",
      { chunks: [{ chunk_no: 0, content: "x" }] },
      "INDEX_SHAPE",
      "document",
    ],
    [
      "a repeated chunk number",
      {
        document: { id: "d" },
        chunks: [
          { chunk_no: 1, content: "x" },
          { chunk_no: 1, content: "y" },
        ],
      },
      "DUPLICATE_CHUNK",
      "chunks[1].chunk_no",
    ],
    [
      "a chunk vector of the wrong dimension",
      { document: { id: "d" }, chunks: [{ chunk_no: 0, content: "x", vector: [1] }] },
      "VECTOR_DIMENSION",
      "chunks[0].vector",
    ],
  ])("index with %s is 400", async (_, body, reason, field) => {
    const res = await post("/rag/index", body);
    expect(res.status).toBe(400);
    expect(reasonOf(res.body)?.reason).toBe(reason);
    expect(reasonOf(res.body)?.metadata?.field).toBe(field);
  });

  it("indexes a batch of documents in one call, all or nothing, of the batch's one data class", async () => {
    const docOf = (id: string, classification = "internal", traits = ["role:staff"]) => ({
      document: { id, title: id, path: `${id}.md`, required_traits: traits, classification },
      chunks: [
        { chunk_no: 0, content: `${id} rota for the night shift` },
        { chunk_no: 1, content: `${id} handover notes` },
      ],
    });
    const ok = await post("/rag/index-batch", {
      classification: "internal",
      documents: [docOf("rota-a"), docOf("rota-b")],
    });
    expect(ok).toEqual({
      status: 200,
      body: {
        documents: [
          { ok: true, doc_id: "rota-a", chunks: 2 },
          { ok: true, doc_id: "rota-b", chunks: 2 },
        ],
      },
    });
    const found = await post("/rag/query", { q: "night shift rota", user_traits: ["role:staff"] });
    const rotas = (items: unknown) =>
      (items as { doc_id: string }[]).map((i) => i.doc_id).filter((id) => id.startsWith("rota"));
    expect(rotas(found.body.items).sort()).toEqual(["rota-a", "rota-a", "rota-b", "rota-b"]);
    // A document of another class than the batch's (what the gateway's policy saw): refused.
    const mixed = await post("/rag/index-batch", {
      classification: "internal",
      documents: [docOf("rota-c"), docOf("rota-d", "phi")],
    });
    expect(mixed.status).toBe(400);
    expect(reasonOf(mixed.body)).toMatchObject({
      reason: "BATCH_CLASSIFICATION",
      metadata: { field: "documents[1].document.classification" },
    });
    // An access change in the batch: refused, and nothing of the batch written.
    const change = await post("/rag/index-batch", {
      classification: "internal",
      documents: [docOf("rota-e"), docOf("rota-b", "internal", ["role:hr"])],
    });
    expect(change.status).toBe(409);
    expect(reasonOf(change.body)).toMatchObject({
      reason: "DOCUMENT_ACCESS_CHANGE",
      metadata: { doc_id: "rota-b" },
    });
    const none = await post("/rag/query", { q: "rota", user_traits: ["role:staff", "role:hr"] });
    expect(rotas(none.body.items)).not.toContain("rota-e");
    for (const id of ["rota-a", "rota-b"]) {
      expect(
        (
          await fetch(`${url}/rag/documents/${id}`, {
            method: "DELETE",
            headers: { authorization: `Bearer ${secret}` },
          })
        ).status,
      ).toBe(200);
    }
  });

  it("refuses calls without the core's secret", async () => {
    for (const authorization of ["", "Bearer tgc_wrong", `Bearer ${secret}x`, secret]) {
      const res = await post("/rag/query", { q: "leave" }, authorization);
      expect(res.status).toBe(401);
    }
    const stats = await fetch(`${url}/rag/stats`);
    expect(stats.status).toBe(401);
  });

  it("serves Connect too: stats and delete", async () => {
    const client = createClient(
      RagPluginService,
      createConnectTransport({ baseUrl: url, httpVersion: "1.1" }),
    );
    const headers = { authorization: `Bearer ${secret}` };
    const before = await client.stats({}, { headers });
    expect(before).toMatchObject({
      documents: 2n,
      chunks: 2n,
      dimension: dim,
      embedder: "local-hash",
    });
    expect(await client.delete({ docId: "dosage" }, { headers })).toMatchObject({
      ok: true,
      chunks: 1,
    });
    await expect(client.delete({ docId: "dosage" }, { headers })).rejects.toMatchObject({
      code: 5,
    });
    await expect(client.stats({})).rejects.toMatchObject({ code: 16 });
  });
});
