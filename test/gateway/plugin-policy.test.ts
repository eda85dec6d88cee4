import type { JsonObject } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import type { PluginManifest } from "../../src/gateway/manifest.js";
import { enginePluginPolicy } from "../../src/gateway/policy.js";
import {
  type PolicyEngine,
  planSanitize,
  type SanitizeSpec,
  sanitizeDocument,
} from "../../src/policy/index.js";

/**
 * The gateway's sanitize decision on batch payloads (rag_index_batch): a dotted path is
 * anchored at a document, so `chunks.content` must reach `documents[i].chunks[j].content`
 * in a batch as it reaches `chunks[j].content` in a single document's payload; otherwise a
 * policy that strips chunk text from indexing would pass it through whenever the core sends
 * documents in batches.
 */

const spec: SanitizeSpec = { fields: ["chunks.content", "document.owner"], classifications: [] };

/** An engine that sanitizes every plugin call with `spec` (the real sanitizer). */
const engine = {
  evaluate: () => ({ decision: "sanitize", sanitize: spec }),
  sanitize: (document: unknown, s: SanitizeSpec) => sanitizeDocument(document, planSanitize(s)),
} as unknown as PolicyEngine;

const plugin = { id: "rag-db", pluginType: "rag", traits: [] } as unknown as PluginManifest;

const sanitized = (payload: JsonObject): JsonObject => {
  const verdict = enginePluginPolicy(() => engine).decide({
    plugin,
    operation: "rag_index_batch",
    classifications: ["phi"],
  });
  if (verdict.decision !== "sanitize")
    throw new Error(`expected sanitize, got ${verdict.decision}`);
  return verdict.apply(payload);
};

const document = (n: number): JsonObject => ({
  document: { path: `notes/${n}.txt`, owner: `dr-${n}`, classification: "phi" },
  chunks: [
    { index: 0, content: `patient ${n} first`, embedding: [0.1, 0.2] },
    { index: 1, content: `patient ${n} second`, embedding: [0.3, 0.4] },
  ],
});

describe("gateway sanitize decisions", () => {
  it("take a dotted path out of a single document's payload", () => {
    const out = sanitized(document(1));
    expect(JSON.stringify(out)).not.toContain("patient 1");
    expect(JSON.stringify(out)).not.toContain("dr-1");
    expect(out).toMatchObject({ chunks: [{ index: 0 }, { index: 1 }] });
  });

  it("take it out of every document of a batch, anchored at the document", () => {
    const out = sanitized({ classification: "phi", documents: [document(1), document(2)] });
    const text = JSON.stringify(out);
    for (const secret of ["patient 1", "patient 2", "dr-1", "dr-2"]) {
      expect(text).not.toContain(secret);
    }
    // What the paths do not name stays.
    expect(out).toMatchObject({
      classification: "phi",
      documents: [
        { document: { path: "notes/1.txt" }, chunks: [{ index: 0, embedding: [0.1, 0.2] }, {}] },
        { document: { path: "notes/2.txt" }, chunks: [{ index: 0 }, { index: 1 }] },
      ],
    });
  });
});
