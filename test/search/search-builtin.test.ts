import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Ingestion and search through the core with the built-in store (rag.backend = builtin, the
 * default): the caller's traits come from their roles, the store filters by them, and the core
 * re-checks each result against the policy (deny drops, sanitize redacts).
 */

const password = "search-builtin-password";
let server: TestServer;
const tokens: Record<string, string> = {};

const documents = [
  {
    path: "public/hours.md",
    content: "Clinic opening hours: the clinic opens at eight and closes at six on weekdays.",
    required_traits: [],
    classification: "public",
  },
  {
    path: "clinical/sepsis.md",
    title: "Sepsis triage",
    content: "Sepsis triage protocol: measure lactate, start antibiotics within one hour.",
    required_traits: ["role:clinician"],
    classification: "internal",
  },
  {
    path: "contacts/pat.md",
    content:
      "Callback list: reach the patient Pat at 555-123-4567 or pat@example.test about the clinic hours.",
    required_traits: ["role:viewer"],
    classification: "pii",
  },
  {
    path: "records/chart.html",
    content:
      "<html><body><p>Chart: diagnosis of sepsis, lactate 4.1, clinic admission.</p></body></html>",
    required_traits: [],
    classification: "phi",
  },
];

beforeAll(async () => {
  server = await startTestServer();
  for (const [user, role] of [
    ["root", "admin"],
    ["vic", "viewer"],
    ["ana", "analyst"],
    ["dr-lee", "clinician"],
  ] as const) {
    await server.createUser(user, password, [role]);
    tokens[user] = (await callJson(server.url, "/auth/login", { username: user, password })).body
      .token as string;
  }
});
afterAll(async () => server?.close());

const search = (user: string, q: string, top_k = 10) =>
  callJson(server.url, "/api/search", { q, top_k }, { token: tokens[user] });

describe("search with the built-in store", () => {
  it("ingests documents once; an unchanged document is skipped the second time", async () => {
    const first = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents },
      { token: tokens.root },
    );
    expect(first.status).toBe(200);
    const results = first.body.documents as { path: string; chunks: number; skipped: boolean }[];
    expect(results.map((r) => [r.path, r.skipped])).toEqual(documents.map((d) => [d.path, false]));
    expect(results.every((r) => r.chunks >= 1)).toBe(true);
    const again = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents },
      { token: tokens.root },
    );
    expect((again.body.documents as { skipped: boolean }[]).every((r) => r.skipped)).toBe(true);
  });

  it("shows each user only what their roles allow, and re-checks the policy on each item", async () => {
    const viewer = await search("vic", "sepsis triage lactate clinic");
    const clinician = await search("dr-lee", "sepsis triage lactate clinic");
    expect(viewer.status).toBe(200);
    const paths = (r: typeof viewer) =>
      (r.body.items as { path: string }[]).map((i) => i.path).sort();
    // The viewer lacks role:clinician and a need to know personal data (pii is confidential);
    // nobody here holds compliance:hipaa, so the chart (phi) is denied to both.
    expect(paths(viewer)).toEqual(["public/hours.md"]);
    expect(paths(clinician)).toEqual(["clinical/sepsis.md", "contacts/pat.md", "public/hours.md"]);
  });

  it("fills top_k with allowed documents when a denied one is the nearest", async () => {
    // The chart (phi) matches best, but no one here may see health data: it is kept out
    // inside the store's query, so the clinician still gets one result, not none.
    const res = await search("dr-lee", "Chart diagnosis of sepsis lactate 4.1 clinic admission", 1);
    expect((res.body.items as { path: string }[]).map((i) => i.path)).toEqual([
      "clinical/sepsis.md",
    ]);
  });

  it("redacts personal data for an analyst without PII clearance, not for a clinician", async () => {
    const pick = async (user: string) =>
      (
        (await search(user, "callback patient Pat")).body.items as {
          path: string;
          content: string;
          sanitized: boolean;
        }[]
      ).find((i) => i.path === "contacts/pat.md");
    const forViewer = await pick("ana");
    const forClinician = await pick("dr-lee");
    expect(forViewer?.sanitized).toBe(true);
    expect(forViewer?.content).not.toContain("555-123-4567");
    expect(forViewer?.content).not.toContain("pat@example.test");
    expect(forClinician).toMatchObject({ sanitized: false });
    expect(forClinician?.content).toContain("555-123-4567");
  });

  it("refuses ingestion without capability:ingest, bad paths and unknown classifications", async () => {
    const doc = { path: "x.md", content: "text", required_traits: [], classification: "public" };
    const viewer = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [doc] },
      { token: tokens.vic },
    );
    expect([viewer.status, viewer.reason]).toEqual([403, "CAPABILITY"]);
    const dotdot = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [{ ...doc, path: "../etc/passwd" }] },
      { token: tokens.root },
    );
    expect([dotdot.status, dotdot.reason]).toEqual([400, "INVALID_PATH"]);
    const absolute = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [{ ...doc, path: "/home/me/x.md" }] },
      { token: tokens.root },
    );
    expect(absolute.status).toBe(400);
    const unknown = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [{ ...doc, classification: "secretish" }] },
      { token: tokens.root },
    );
    expect([unknown.status, unknown.reason]).toEqual([400, "UNKNOWN_CLASSIFICATION"]);
    const badTrait = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [{ ...doc, required_traits: ["role:wizard"] }] },
      { token: tokens.root },
    );
    expect(badTrait.status).toBe(400);
    expect(JSON.stringify(badTrait.body)).toContain("required_traits");
  });

  it("refuses a request with a document without text before indexing any of it", async () => {
    const good = {
      path: "batch/good.md",
      content: "Unique wording zebra quartz for this batch.",
      required_traits: [],
      classification: "public",
    };
    const empty = { ...good, path: "batch/empty.html", content: "<script>only()</script>" };
    const res = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [good, empty] },
      { token: tokens.root },
    );
    expect([res.status, res.reason]).toEqual([400, "EMPTY_DOCUMENT"]);
    expect(JSON.stringify(res.body)).toContain("documents[1].content");
    const again = await callJson(
      server.url,
      "/api/rag/ingest",
      { documents: [good] },
      {
        token: tokens.root,
      },
    );
    // Not skipped: the refused request had indexed nothing.
    expect((again.body.documents as { skipped: boolean }[])[0]?.skipped).toBe(false);
  });

  it("answers 409 DOCUMENT_ACCESS_CHANGE to a re-ingest that would change who may read a document, unless asked", async () => {
    const ingest = (body: Record<string, unknown>) =>
      callJson(server.url, "/api/rag/ingest", body, { token: tokens.root });
    const sepsis = documents[1] as Record<string, unknown>;
    const downgrade = { ...sepsis, required_traits: [], classification: "public" };
    const refused = await ingest({ documents: [downgrade] });
    expect([refused.status, refused.reason]).toEqual([409, "DOCUMENT_ACCESS_CHANGE"]);
    expect(refused.body.message).toContain("clinical/sepsis.md");
    // Still the clinician's only.
    const paths = async (user: string) =>
      ((await search(user, "sepsis triage lactate")).body.items as { path: string }[]).map(
        (i) => i.path,
      );
    expect(await paths("vic")).not.toContain("clinical/sepsis.md");
    const { rows } = await server.core.db.query<{ outcome: string; details: unknown }>(
      "SELECT outcome, details FROM audit_events WHERE action = 'rag_ingest' AND outcome = 'denied'",
    );
    expect(JSON.stringify(rows)).toContain("DOCUMENT_ACCESS_CHANGE");

    const changed = await ingest({ documents: [downgrade], allow_access_change: true });
    expect(changed.status).toBe(200);
    expect(await paths("vic")).toContain("clinical/sepsis.md");
    const events = await server.core.db.query<{ details: Record<string, unknown> }>(
      "SELECT details FROM audit_events WHERE action = 'rag_access_change'",
    );
    expect(events.rows.map((r) => r.details)).toEqual([
      {
        doc_id: expect.any(String),
        before: {
          required_traits: ["data_access:internal", "role:clinician"],
          classification: "internal",
        },
        after: { required_traits: ["data_access:public"], classification: "public" },
      },
    ]);
  });

  it("needs a token, and never logs the query or the documents", async () => {
    expect((await callJson(server.url, "/api/search", { q: "x" })).status).toBe(401);
    const logs = server.logs.join("\n");
    expect(logs).not.toContain("lactate");
    expect(logs).not.toContain("555-123-4567");
  });
});
