import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DomainError } from "../../src/errors.js";
import { createGateway } from "../../src/gateway/gateway.js";
import { silentLogger } from "../../src/log.js";
import { compilePolicy, createTraitRegistry, defaultPolicy } from "../../src/policy/index.js";
import { accessChangeRefused } from "../../src/rag/access-change.js";
import type { BackendDocument, RagBackend } from "../../src/search/backend.js";
import { createIngestStore } from "../../src/search/ingest-store.js";
import { createSearch, type IngestDocumentInput } from "../../src/search/search.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";

/**
 * Issue 13, item 9: a re-ingest that would change a document's required traits or
 * classification is refused unless the caller asks for it, and either way the change is
 * audited (before and after, never the content). The core's record of each document (the
 * ingest store) runs on each database; the backend is faked and records what it was given.
 */

const engine = compilePolicy(defaultPolicy, createTraitRegistry());
const operator = { kind: "user" as const, id: "op-1", roles: ["admin"] };

interface AuditEvent {
  action: string;
  outcome: string;
  target: string | null;
  details?: Record<string, unknown>;
}

/**
 * `failOn`: the path whose document the backend fails, with `failure` (default PLUGIN_DOWN).
 * `batch`: the backend takes several documents in one call (as a plugin with rag_index_batch
 * does), indexes them and then fails with `failure`, as a malformed reply or a deadline after
 * the plugin's commit does.
 */
function setup(
  db: Database,
  {
    failOn,
    failure,
    batch,
    recordFails,
  }: { failOn?: string; failure?: DomainError; batch?: boolean; recordFails?: boolean } = {},
) {
  const indexed: { doc: BackendDocument; allowAccessChange: boolean }[] = [];
  const events: AuditEvent[] = [];
  const error = failure ?? new DomainError("unavailable", "PLUGIN_DOWN", "down");
  const backend: RagBackend = {
    async index(doc, _requestId, options) {
      indexed.push({ doc, allowAccessChange: options?.allowAccessChange === true });
      if (doc.path === failOn) throw error;
      return doc.chunks.length;
    },
    ...(batch
      ? {
          async indexMany(docs, _request, options) {
            for (const doc of docs) {
              indexed.push({ doc, allowAccessChange: options?.allowAccessChange === true });
            }
            throw error;
          },
        }
      : {}),
    query: async () => [],
    stats: async () => undefined,
  };
  const search = createSearch({
    backend: () => ({ key: "builtin", backend }),
    policy: () => engine,
    ingested: recordFails
      ? {
          ...createIngestStore(db),
          recordMany: async () => {
            throw new DomainError("unavailable", "DATABASE_UNAVAILABLE", "the database is down");
          },
        }
      : createIngestStore(db),
    audit: {
      write: async (event) => {
        events.push(event as AuditEvent);
        return { id: "e", seq: "1", hash: "h" };
      },
    },
    log: silentLogger,
    topKDefault: () => 5,
  });
  return { search, indexed, events, store: createIngestStore(db) };
}

const notes = (extra: Partial<IngestDocumentInput> = {}): IngestDocumentInput => ({
  path: "a/notes.md",
  title: "",
  content: "Clinician notes: the patient in bed four needs lactate every two hours.",
  requiredTraits: ["role:clinician"],
  classification: "internal",
  ...extra,
});

describe.each(databaseTargets())("ingestion and a document's access on $name", (target) => {
  let db: Database;
  beforeAll(async () => {
    db = await openTestDatabase(target);
  });
  afterAll(async () => {
    await db?.close();
  });

  it("records and audits the documents indexed before one failed (a call per document)", async () => {
    const { search, events } = setup(db, { failOn: "b/two.md" });
    const docs = ["b/one.md", "b/two.md", "b/three.md"].map((path) => notes({ path }));
    await expect(search.ingest(operator, docs, "r-partial")).rejects.toMatchObject({
      reason: "PLUGIN_DOWN",
    });
    const ingestEvent = events.find((e) => e.action === "rag_ingest");
    expect(ingestEvent).toMatchObject({
      outcome: "failure",
      details: { documents: 1, indexed: 1, failed_index: 1, reason: "PLUGIN_DOWN" },
    });
    const again = await search.ingest(operator, [notes({ path: "b/one.md" })], "r-again");
    // b/one.md was recorded: unchanged, it is skipped the second time.
    expect(again[0]?.skipped).toBe(true);
  });

  it("refuses a re-ingest that would change the required traits or the classification, indexing nothing, and audits it", async () => {
    const { search, indexed, events, store } = setup(db);
    const [first] = await search.ingest(operator, [notes()], "r1");
    const docId = first?.docId ?? "";
    const recorded = await store.find("builtin", docId);
    const other = notes({ path: "a/other.md", content: "Another document of the batch." });
    for (const change of [
      { requiredTraits: [], classification: "public" },
      { requiredTraits: ["role:viewer"] },
      { classification: "phi" },
    ]) {
      indexed.length = 0;
      events.length = 0;
      const refused = search.ingest(operator, [other, notes(change)], "r2");
      await expect(refused).rejects.toBeInstanceOf(DomainError);
      await expect(refused).rejects.toMatchObject({
        kind: "already_exists",
        reason: "DOCUMENT_ACCESS_CHANGE",
        metadata: { doc_id: docId, index: "1" },
        message: expect.stringContaining("a/notes.md"),
      });
      // Nothing of the request was indexed, and the core's record is as it was.
      expect(indexed).toEqual([]);
      expect(await store.find("builtin", docId)).toEqual(recorded);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({
        action: "rag_ingest",
        outcome: "denied",
        target: "builtin",
        details: {
          reason: "DOCUMENT_ACCESS_CHANGE",
          indexed: 0,
          refused: [
            {
              index: 1,
              doc_id: docId,
              before: {
                required_traits: ["data_access:internal", "role:clinician"],
                classification: "internal",
              },
            },
          ],
        },
      });
      const text = JSON.stringify(events);
      expect(text).not.toContain("lactate");
      expect(text).not.toContain("notes.md");
    }
  });

  it("changes them when asked, auditing before and after without the content", async () => {
    const { search, indexed, events, store } = setup(db);
    const path = "b/notes.md";
    const [first] = await search.ingest(operator, [notes({ path })], "r1");
    indexed.length = 0;
    events.length = 0;
    const [changed] = await search.ingest(
      operator,
      [notes({ path, requiredTraits: [], classification: "public" })],
      "r2",
      { allowAccessChange: true },
    );
    expect(changed).toMatchObject({ docId: first?.docId, skipped: false });
    expect(indexed).toHaveLength(1);
    expect(indexed[0]?.allowAccessChange).toBe(true);
    expect(indexed[0]?.doc.requiredTraits).toEqual(["data_access:public"]);
    expect(await store.find("builtin", first?.docId ?? "")).toMatchObject({
      requiredTraits: ["data_access:public"],
      classification: "public",
    });
    const change = events.find((e) => e.action === "rag_access_change");
    expect(change).toMatchObject({
      outcome: "success",
      target: "builtin",
      details: {
        doc_id: first?.docId,
        before: {
          required_traits: ["data_access:internal", "role:clinician"],
          classification: "internal",
        },
        after: { required_traits: ["data_access:public"], classification: "public" },
      },
    });
    expect(events.find((e) => e.action === "rag_ingest")?.outcome).toBe("success");
    expect(JSON.stringify(events)).not.toContain("lactate");
  });

  it("needs no flag for new content under the same access, and audits no access change", async () => {
    const { search, indexed, events } = setup(db);
    const path = "c/notes.md";
    await search.ingest(operator, [notes({ path })], "r1");
    indexed.length = 0;
    events.length = 0;
    const [again] = await search.ingest(
      operator,
      [notes({ path, content: "Clinician notes, revised: lactate every hour." })],
      "r2",
    );
    expect(again?.skipped).toBe(false);
    expect(indexed[0]?.allowAccessChange).toBe(false);
    expect(events.map((e) => e.action)).toEqual(["rag_ingest"]);
  });

  it.each([
    ["a batch whose reply breaks the contract", "batch"],
    ["a call per document that failed", "single"],
  ] as const)(
    "audits the access change of %s as unconfirmed: the plugin may have applied it",
    async (_name, mode) => {
      const steady = notes({ path: `${mode}/steady.md` });
      const changedPath = `${mode}/changed.md`;
      const first = await setup(db).search.ingest(
        operator,
        [steady, notes({ path: changedPath })],
        "r1",
      );
      const docId = first[1]?.docId ?? "";
      const badReply = new DomainError("internal", "PLUGIN_BAD_REPLY", "not the contract");
      // The changed document fails: with its batch, or alone (the steady one goes first).
      const { search, events, store } =
        mode === "batch"
          ? setup(db, { batch: true, failure: badReply })
          : setup(db, { failOn: changedPath });
      const attempt = search.ingest(
        operator,
        [
          notes({ ...steady, content: "Revised steady notes." }),
          // Fewer required traits, the same class: one batch with the steady document.
          notes({ path: changedPath, requiredTraits: [] }),
        ],
        "r2",
        { allowAccessChange: true },
      );
      await expect(attempt).rejects.toMatchObject({
        reason: mode === "batch" ? "PLUGIN_BAD_REPLY" : "PLUGIN_DOWN",
      });
      const changes = events.filter((e) => e.action === "rag_access_change");
      expect(changes).toEqual([
        expect.objectContaining({
          outcome: "error",
          target: "builtin",
          details: {
            doc_id: docId,
            confirmed: false,
            before: {
              required_traits: ["data_access:internal", "role:clinician"],
              classification: "internal",
            },
            after: { required_traits: ["data_access:internal"], classification: "internal" },
          },
        }),
      ]);
      expect(events.find((e) => e.action === "rag_ingest")?.outcome).toBe("failure");
      // The core's record keeps the old access: the next ingest asks for the change again.
      expect((await store.find("builtin", docId))?.requiredTraits).toEqual([
        "data_access:internal",
        "role:clinician",
      ]);
      expect(JSON.stringify(events)).not.toContain("lactate");
    },
  );

  it("audits an access change the backend made even when the core cannot record it", async () => {
    const path = "unrecorded/changed.md";
    const [first] = await setup(db).search.ingest(operator, [notes({ path })], "r1");
    const { search, events } = setup(db, { recordFails: true });
    await expect(
      search.ingest(operator, [notes({ path, requiredTraits: [] })], "r2", {
        allowAccessChange: true,
      }),
    ).rejects.toMatchObject({ reason: "DATABASE_UNAVAILABLE" });
    expect(events.filter((e) => e.action === "rag_access_change")).toEqual([
      expect.objectContaining({
        outcome: "success",
        details: expect.objectContaining({ doc_id: first?.docId }),
      }),
    ]);
  });

  it("audits no access change of a batch the gateway refused before forwarding it", async () => {
    // A real gateway's refusal (no such plugin): the payload never reached a plugin.
    const gateway = createGateway({
      plugin: async () => null,
      coreAuthorization: () => "",
      allowlist: { operationsFor: async () => new Set() },
      policy: { decide: () => ({ decision: "allow" }) },
      forwarder: {
        forward: async () => {
          throw new Error("not reached");
        },
        close() {},
      },
      audit: { write: async () => ({ id: "e", seq: "1", hash: "h" }) },
      log: silentLogger,
      timeouts: { defaultMs: 1000, maxMs: 1000 },
    });
    const refused = await gateway
      .call({
        caller: { kind: "service", id: "sa", name: "ai-core" },
        callerPlugin: "ai-core",
        pluginId: "rag",
        operation: "rag_index_batch",
        payload: {},
        timeoutMs: undefined,
        requestId: "r",
      })
      .then(
        () => undefined,
        (err: unknown) => err as DomainError,
      );
    const path = "refused-by-gateway/changed.md";
    await setup(db).search.ingest(
      operator,
      [notes({ path: "refused-by-gateway/steady.md" }), notes({ path })],
      "r1",
    );
    const { search, events } = setup(db, { batch: true, failure: refused });
    await expect(
      search.ingest(
        operator,
        [
          notes({ path: "refused-by-gateway/steady.md", content: "Revised." }),
          notes({ path, requiredTraits: [] }),
        ],
        "r2",
        { allowAccessChange: true },
      ),
    ).rejects.toMatchObject({ reason: "PLUGIN_NOT_FOUND" });
    expect(events.filter((e) => e.action === "rag_access_change")).toEqual([]);
  });

  it("audits no access change of a document that was never sent (a call per document, the first failed)", async () => {
    const failing = "unsent/first.md";
    const changedPath = "unsent/changed.md";
    await setup(db).search.ingest(operator, [notes({ path: changedPath })], "r1");
    const { search, events, indexed } = setup(db, { failOn: failing });
    await expect(
      search.ingest(
        operator,
        [notes({ path: failing }), notes({ path: changedPath, requiredTraits: [] })],
        "r2",
        { allowAccessChange: true },
      ),
    ).rejects.toMatchObject({ reason: "PLUGIN_DOWN" });
    // Only the first document reached the backend; the changed one was never sent.
    expect(indexed.map((i) => i.doc.path)).toEqual([failing]);
    expect(events.filter((e) => e.action === "rag_access_change")).toEqual([]);
    expect(events.find((e) => e.action === "rag_ingest")).toMatchObject({
      outcome: "failure",
      details: { indexed: 0, failed_index: 0 },
    });
  });

  it.each([["batch"], ["single"]] as const)(
    "audits no access change the plugin refused itself (%s)",
    async (mode) => {
      const path = `refused-${mode}/changed.md`;
      const [first] = await setup(db).search.ingest(operator, [notes({ path })], "r1");
      // The plugin's own check, inside its transaction (a concurrent request changed it).
      const refused = accessChangeRefused(first?.docId ?? "", `document ${first?.docId}`, {});
      const { search, events } = setup(db, {
        batch: mode === "batch",
        failOn: path,
        failure: refused,
      });
      await expect(
        search.ingest(
          operator,
          [notes({ path: `refused-${mode}/other.md` }), notes({ path, requiredTraits: [] })],
          "r2",
          { allowAccessChange: true },
        ),
      ).rejects.toMatchObject({ reason: "DOCUMENT_ACCESS_CHANGE" });
      expect(events.filter((e) => e.action === "rag_access_change")).toEqual([]);
    },
  );

  it("refuses two documents with one path in a request", async () => {
    const { search, indexed } = setup(db);
    const twice = search.ingest(
      operator,
      [notes({ path: "d/notes.md" }), notes({ path: "d/notes.md", requiredTraits: [] })],
      "r1",
    );
    await expect(twice).rejects.toMatchObject({
      kind: "invalid_argument",
      reason: "DUPLICATE_DOCUMENT",
      field: "documents[1].path",
    });
    expect(indexed).toEqual([]);
  });
});
