import { describe, expect, it } from "vitest";
import { PluginError } from "../../src/gateway/gateway.js";
import { silentLogger } from "../../src/log.js";
import { compilePolicy, createTraitRegistry, defaultPolicy } from "../../src/policy/index.js";
import { type BackendHit, pluginBackend, type RagBackend } from "../../src/search/backend.js";
import type { IngestRecord, IngestStore } from "../../src/search/ingest-store.js";
import { createSearch, traitsOfRoles } from "../../src/search/search.js";

/** The core's checks on a backend's answer, with the backend and the ingest records faked. */

const engine = compilePolicy(defaultPolicy, createTraitRegistry());

const hit = (docId: string, extra: Partial<BackendHit> = {}): BackendHit => ({
  id: `${docId}:0`,
  docId,
  chunkNo: 0,
  title: docId,
  path: `${docId}.md`,
  content: `text of ${docId}`,
  score: 0.5,
  requiredTraits: [],
  classification: "public",
  ...extra,
});

function setup(hits: BackendHit[], records: Record<string, Partial<IngestRecord>>) {
  const backend: RagBackend = {
    index: async () => 0,
    query: async () => hits,
    stats: async () => undefined,
  };
  const ingested: IngestStore = {
    find: async () => undefined,
    findMany: async (_backend, ids) =>
      new Map(
        ids
          .filter((id) => records[id] !== undefined)
          .map((id) => [
            id,
            {
              docId: id,
              path: `${id}.md`,
              contentHash: "h",
              chunks: 1,
              requiredTraits: [],
              classification: "public",
              ...records[id],
            },
          ]),
      ),
    record: async () => undefined,
    recordMany: async () => undefined,
  };
  return createSearch({
    backend: () => ({ key: "plugin:rag", backend }),
    policy: () => engine,
    ingested,
    audit: { write: async () => ({ id: "e", seq: "1", hash: "h" }) },
    log: silentLogger,
    topKDefault: () => 5,
  });
}

const viewer = { kind: "user" as const, id: "u1", roles: ["viewer"] };

describe("search checks what the backend answers", () => {
  it("uses the core's record of each document, not the backend's word", async () => {
    const search = setup(
      [
        // The backend says public; the core ingested it as phi: the viewer must not see it.
        hit("lied-classification", { classification: "public" }),
        // The backend says nothing is required; the core ingested it for clinicians.
        hit("lied-traits", { requiredTraits: [] }),
        // Never ingested by the core.
        hit("unknown"),
        hit("honest"),
      ],
      {
        "lied-classification": { classification: "phi" },
        "lied-traits": { requiredTraits: ["role:clinician"] },
        honest: {},
      },
    );
    const items = await search.search(viewer, { q: "x", topK: 10 }, "r1");
    expect(items.map((i) => i.docId)).toEqual(["honest"]);
  });

  it("cuts an answer longer than top_k", async () => {
    const hits = Array.from({ length: 10 }, (_, i) => hit(`d${i}`));
    const records = Object.fromEntries(hits.map((h) => [h.docId, {}]));
    const items = await setup(hits, records).search(viewer, { q: "x", topK: 3 }, "r2");
    expect(items).toHaveLength(3);
  });

  it("derives the caller's traits from roles through the registry", () => {
    const traits = traitsOfRoles(engine, ["clinician", "no-such-role"]);
    expect(traits.has("role:clinician")).toBe(true);
    expect(traits.has("role:viewer")).toBe(true);
    expect(traits.has("security:pii_clearance")).toBe(true);
    expect([...traits].some((t) => t.includes("no-such-role"))).toBe(false);
  });
});

describe("the plugin backend", () => {
  const doc = {
    id: "doc-1",
    title: "t",
    path: "ward/notes.md",
    requiredTraits: ["data_access:public"],
    classification: "public",
  };
  const failingWith = (err: Error) => ({
    call: async (input: { payload: Record<string, unknown> }) => {
      sent.push(input.payload);
      throw err;
    },
  });
  const sent: Record<string, unknown>[] = [];
  const declaresNothing = async () => false;

  it("asks a plugin for its counts only when its manifest declares rag_stats", async () => {
    const calls: { operation: string; pluginId: string }[] = [];
    let reply: Record<string, unknown> = { documents: "12", chunks: 40, dimension: 1536 };
    const gateway = {
      call: async (input: { operation: string; pluginId: string }) => {
        calls.push({ operation: input.operation, pluginId: input.pluginId });
        return reply;
      },
    };
    const silent = pluginBackend(gateway as never, "rag", declaresNothing);
    expect(await silent.stats({ requestId: "r1" })).toBeUndefined();
    expect(calls).toEqual([]);
    const asked: string[] = [];
    const reporting = pluginBackend(gateway as never, "rag", async (id, op) => {
      asked.push(`${id}/${op}`);
      return op === "rag_stats";
    });
    expect(await reporting.stats({ requestId: "r2" })).toEqual({ documents: 12, chunks: 40 });
    expect(asked).toEqual(["rag/rag_stats"]);
    expect(calls).toEqual([{ operation: "rag_stats", pluginId: "rag" }]);
    // Proto JSON leaves zero counts out.
    reply = {};
    expect(await reporting.stats({ requestId: "r3" })).toEqual({ documents: 0, chunks: 0 });
    reply = { documents: "many", chunks: 1 };
    await expect(reporting.stats({ requestId: "r4" })).rejects.toMatchObject({
      reason: "PLUGIN_BAD_REPLY",
    });
  });

  it("turns the plugin's refusal of an access change into the core's own, and asks for one only when told", async () => {
    const refusal = new PluginError(409, {
      code: "already_exists",
      message: "document doc-1 is already indexed with other required traits",
      details: [{ reason: "DOCUMENT_ACCESS_CHANGE" }],
    });
    const backend = pluginBackend(failingWith(refusal) as never, "rag", declaresNothing);
    await expect(
      backend.index({ ...doc, chunks: ["x"] }, { requestId: "r1" }),
    ).rejects.toMatchObject({
      kind: "already_exists",
      reason: "DOCUMENT_ACCESS_CHANGE",
      metadata: { doc_id: "doc-1", plugin: "rag" },
    });
    expect(sent[0]?.allow_access_change).toBeUndefined();
    await backend
      .index({ ...doc, chunks: ["x"] }, { requestId: "r2" }, { allowAccessChange: true })
      .catch(() => {});
    expect(sent[1]?.allow_access_change).toBe(true);
    // Any other plugin error stays the plugin's.
    const other = pluginBackend(
      failingWith(new PluginError(409, { code: "aborted" })) as never,
      "rag",
      declaresNothing,
    );
    await expect(other.index({ ...doc, chunks: ["x"] }, { requestId: "r3" })).rejects.toMatchObject(
      {
        reason: "PLUGIN_ERROR",
      },
    );
  });
});
