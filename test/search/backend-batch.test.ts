import { describe, expect, it } from "vitest";
import { classificationsOf, type Gateway, PluginError } from "../../src/gateway/gateway.js";
import { pluginBackend } from "../../src/search/backend.js";

/**
 * A RAG plugin's batch indexing through the gateway, with the gateway faked: the batch call
 * is used only when the plugin declares it, its payload names the batch's data class where
 * the gateway's policy reads it, and a plugin's access refusal stays the core's refusal.
 */

const doc = (id: string, classification: string) => ({
  id,
  title: id,
  path: `${id}.md`,
  requiredTraits: [`data_access:${classification}`],
  classification,
  chunks: [`${id} one`, `${id} two`],
});

function fakeGateway(reply: (operation: string, payload: Record<string, unknown>) => unknown) {
  const calls: { operation: string; payload: Record<string, unknown> }[] = [];
  const gateway = {
    call: async (input: { operation: string; payload: Record<string, unknown> }) => {
      calls.push({ operation: input.operation, payload: input.payload });
      return reply(input.operation, input.payload);
    },
  } as unknown as Gateway;
  return { gateway, calls };
}

const request = { requestId: "r1" };

describe("RAG plugin backend: batches", () => {
  it("sends one rag_index_batch call naming the batch's class, when the plugin declares it", async () => {
    const { gateway, calls } = fakeGateway((_op, payload) => ({
      documents: (payload.documents as unknown[]).map(() => ({ ok: true, chunks: 2 })),
    }));
    const backend = pluginBackend(gateway, "rag", async (_id, op) => op === "rag_index_batch");
    const written = await backend.indexMany?.([doc("a", "phi"), doc("b", "phi")], request);
    expect(written).toEqual([2, 2]);
    expect(calls.map((c) => c.operation)).toEqual(["rag_index_batch"]);
    // The gateway's policy sees the class of what is sent.
    expect(classificationsOf(calls[0]?.payload as never)).toEqual(["phi"]);
  });

  it("falls back to a call per document for a plugin without rag_index_batch", async () => {
    const { gateway, calls } = fakeGateway(() => ({ ok: true, chunks: 2 }));
    const backend = pluginBackend(gateway, "rag", async () => false);
    expect(
      await backend.indexMany?.([doc("a", "internal"), doc("b", "internal")], request),
    ).toEqual([2, 2]);
    expect(calls.map((c) => c.operation)).toEqual(["rag_index", "rag_index"]);
  });

  it("turns the plugin's access refusal into the core's, naming the document", async () => {
    const { gateway } = fakeGateway(() => {
      throw new PluginError(409, {
        code: "already_exists",
        details: [{ reason: "DOCUMENT_ACCESS_CHANGE", metadata: { doc_id: "b" } }],
      });
    });
    const backend = pluginBackend(gateway, "rag", async () => true);
    await expect(
      backend.indexMany?.([doc("a", "internal"), doc("b", "internal")], request),
    ).rejects.toMatchObject({ reason: "DOCUMENT_ACCESS_CHANGE", metadata: { doc_id: "b" } });
  });

  it("refuses a reply without one answer per document", async () => {
    const { gateway } = fakeGateway(() => ({ documents: [{ ok: true, chunks: 2 }] }));
    const backend = pluginBackend(gateway, "rag", async () => true);
    await expect(
      backend.indexMany?.([doc("a", "internal"), doc("b", "internal")], request),
    ).rejects.toMatchObject({ reason: "PLUGIN_BAD_REPLY" });
  });
});
