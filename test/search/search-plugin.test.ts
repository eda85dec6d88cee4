import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { type RagPlugin, startRagPlugin } from "../../src/rag/plugin.js";
import { runIngestCommand } from "../../src/search/ingest-command.js";
import { runCli } from "../support/cli.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The whole retrieval flow through the operator lane: the RAG plugin registered and
 * allowlisted for ai-core, rag.backend = plugin, a folder ingested with the CLI, then search
 * as users with different roles. Health data never reaches a user without HIPAA clearance.
 */

const password = "search-plugin-password";
let server: TestServer;
let plugin: RagPlugin;
let dir: string;
const tokens: Record<string, string> = {};
let admin: (path: string, body: unknown, method?: string) => ReturnType<typeof callJson>;

function write(path: string, text: string) {
  mkdirSync(join(dir, path, ".."), { recursive: true });
  writeFileSync(join(dir, path), text);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "traitgate-search-"));
  server = await startTestServer();
  for (const [user, role] of [
    ["root", "admin"],
    ["vic", "viewer"],
    ["dr-lee", "clinician"],
  ] as const) {
    await server.createUser(user, password, [role]);
    tokens[user] = (await callJson(server.url, "/auth/login", { username: user, password })).body
      .token as string;
  }
  const key = await server.createApiKey([
    "plugins:write",
    "operator:write",
    "settings:write",
    "service_accounts:write",
  ]);
  admin = (path: string, body: unknown, method = "POST") =>
    callJson(server.url, path, body, {
      token: tokens.root,
      method,
      headers: { "x-api-key": key },
    });
  // The core calls plugins as ai-core: a service account of that name makes it an allowlist caller.
  await admin("/api/admin/service-accounts", { name: "ai-core" });
  // rag_index_batch: the core sends each request's documents of one class in one call.
  const endpoints = {
    rag_index: "/rag/index",
    rag_index_batch: "/rag/index-batch",
    rag_query: "/rag/query",
  };
  const registered = await admin("/admin/plugins", {
    id: "rag",
    plugin_type: "retrieval",
    traits: ["compliance:hipaa"],
    endpoints,
  });
  expect(registered.status).toBe(200);
  const coreSecret = (registered.body.credentials as { core_secret: string }).core_secret;
  plugin = await startRagPlugin({
    config: loadRagConfig({
      CORE_SECRET: coreSecret,
      PORT: "0",
      HOST: "127.0.0.1",
      DATA_DIR: join(dir, "plugin-data"),
      EMBEDDING_DIM: "256",
    }),
    log: silentLogger,
  });
  expect(
    (
      await admin(
        "/admin/plugins/rag",
        {
          plugin_type: "retrieval",
          traits: ["compliance:hipaa"],
          endpoints,
          port: plugin.server.port,
        },
        "PUT",
      )
    ).status,
  ).toBe(200);
  expect(
    (
      await admin(
        "/admin/operator/allowlist",
        { caller: "ai-core", target: "rag", operations: Object.keys(endpoints) },
        "PUT",
      )
    ).status,
  ).toBe(200);
  const settings = await admin("/api/admin/settings", {
    "rag.backend": "plugin",
    "rag.plugin_id": "rag",
  });
  expect(settings.status).toBe(200);

  write("corpus/public/hours.md", "Opening hours: the clinic opens at eight and closes at six.");
  write("corpus/public/parking.txt", "Parking for visitors is behind the clinic, level two.");
  write(
    "corpus/clinical/sepsis.html",
    "<html><body><h1>Sepsis</h1><p>Sepsis protocol at the clinic: lactate, cultures, antibiotics within one hour.</p></body></html>",
  );
  write("corpus/records/chart.md", "Chart for the clinic: diagnosis sepsis, lactate 4.1 mmol/L.");
}, 120_000);

afterAll(async () => {
  await server?.close();
  await plugin?.close();
  rmSync(dir, { recursive: true, force: true });
});

const search = (user: string, q: string) =>
  callJson(server.url, "/api/search", { q, top_k: 10 }, { token: tokens[user] });
const paths = (r: Awaited<ReturnType<typeof search>>) =>
  (r.body.items as { path: string }[]).map((i) => i.path).sort();

describe("retrieval through the operator lane", () => {
  it("ingests folders with the CLI, each with its traits and classification", async () => {
    const base = { PATH: process.env.PATH, HOME: process.env.HOME };
    const env = { ...base, TRAITGATE_URL: server.url, TRAITGATE_TOKEN: tokens.root };
    const runs = [
      ["corpus/public", "--classification", "public", "--required-traits", "none"],
      ["corpus/clinical", "--classification", "internal", "--required-traits", "role:clinician"],
      ["corpus/records", "--classification", "phi", "--required-traits", "none"],
    ];
    for (const [folder, ...flags] of runs) {
      const result = await runCli(["ingest", join(dir, folder ?? ""), ...flags], env);
      expect(result.stderr).toContain("files");
      expect(result.code).toBe(0);
    }
    const publicFlags = ["--classification", "public", "--required-traits", "none"];
    const again = await runCli(["ingest", join(dir, "corpus/public"), ...publicFlags], env);
    expect(JSON.parse(again.stdout)).toMatchObject({ files: 2, skipped: 2, indexed: 0 });
    // The plugin holds relative paths only, never this machine's folders.
    const stats = await plugin.rag.stats();
    expect(stats.documents).toBe(4);
    // Through the gateway, a call per batch of one class, not per document: public's two
    // files in one call, then clinical's and records' one each.
    const calls = await server.core.db.query<{ operation: string }>(
      `SELECT details->>'operation' AS operation FROM audit_events
        WHERE action = 'operator_call' AND details->>'operation' LIKE 'rag_index%' ORDER BY seq`,
    );
    expect(calls.rows.map((r) => r.operation)).toEqual([
      "rag_index_batch",
      "rag_index",
      "rag_index",
    ]);
    const noToken = await runCli(["ingest", join(dir, "corpus/public"), ...publicFlags], {
      ...base,
      TRAITGATE_URL: server.url,
    });
    expect(noToken.code).toBe(2);
    // Readers' traits are never left open by default.
    const noTraits = await runCli(
      ["ingest", join(dir, "corpus/public"), "--classification", "public"],
      env,
    );
    expect([noTraits.code, noTraits.stderr.includes("--required-traits")]).toEqual([2, true]);
  }, 60_000);

  it("answers users with different roles differently; health data only with clearance", async () => {
    const viewer = await search("vic", "clinic sepsis lactate hours");
    const clinician = await search("dr-lee", "clinic sepsis lactate hours");
    expect(viewer.status).toBe(200);
    // Under their source, the folder's name (traitgate ingest --source).
    expect(paths(viewer)).toEqual(["public/hours.md", "public/parking.txt"]);
    expect(paths(clinician)).toEqual([
      "clinical/sepsis.html",
      "public/hours.md",
      "public/parking.txt",
    ]);
    // The chart (phi) was indexed (the plugin is in HIPAA scope) but no one here has
    // compliance:hipaa: it comes back to nobody.
    const all = JSON.stringify([viewer.body, clinician.body]);
    expect(all).not.toContain("4.1 mmol");
    const { rows } = await server.core.db.query<{ details: Record<string, unknown> }>(
      "SELECT details FROM audit_events WHERE action = 'operator_call' AND details->>'operation' = 'rag_query'",
    );
    expect(rows.length).toBeGreaterThanOrEqual(2);
  });

  it("keeps two folders' notes.md apart, and changes a document's access only when told (issue 13, item 9)", async () => {
    write("ward/notes.md", "Ward notes: zebra protocol for the night shift, clinicians only.");
    write("lobby/notes.md", "Lobby notes: zebra crossing outside the main entrance.");
    const ingest = async (folder: string, ...flags: string[]) => {
      let err = "";
      const code = await runIngestCommand([join(dir, folder), ...flags], {
        env: { TRAITGATE_URL: server.url, TRAITGATE_TOKEN: tokens.root },
        err: { write: (t: string) => (err += t) },
        out: { write: () => true },
      });
      return { code, err };
    };
    const clinicianOnly = ["--required-traits", "role:clinician", "--classification", "internal"];
    const everyone = ["--required-traits", "none", "--classification", "public"];
    expect((await ingest("ward", ...clinicianOnly)).code).toBe(0);
    expect((await ingest("lobby", ...everyone)).code).toBe(0);
    const notes = async (user: string) =>
      paths(await search(user, "zebra notes")).filter((p) => p.endsWith("notes.md"));
    expect(await notes("dr-lee")).toEqual(["lobby/notes.md", "ward/notes.md"]);
    expect(await notes("vic")).toEqual(["lobby/notes.md"]);

    // Making the ward's notes public by re-ingesting them: refused, named, audited.
    const refused = await ingest("ward", ...everyone);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain("409 DOCUMENT_ACCESS_CHANGE");
    expect(refused.err).toContain("ward/notes.md");
    expect(await notes("vic")).toEqual(["lobby/notes.md"]);
    const allowed = await ingest("ward", ...everyone, "--allow-access-change");
    expect(allowed.code).toBe(0);
    expect(await notes("vic")).toEqual(["lobby/notes.md", "ward/notes.md"]);
    const { rows } = await server.core.db.query<{ action: string; outcome: string }>(
      `SELECT action, outcome FROM audit_events
        WHERE action IN ('rag_ingest', 'rag_access_change') AND outcome <> 'success'
           OR action = 'rag_access_change' ORDER BY seq`,
    );
    expect(rows).toEqual([
      { action: "rag_ingest", outcome: "denied" },
      { action: "rag_access_change", outcome: "success" },
    ]);
  });

  it("indexes a call per document when the allowlist does not grant rag_index_batch", async () => {
    // A manifest may list an operation the allowlist does not grant ai-core: every
    // multi-document ingest would otherwise fail NOT_ALLOWLISTED.
    const granted = ["rag_index", "rag_query"];
    const put = (operations: string[]) =>
      admin("/admin/operator/allowlist", { caller: "ai-core", target: "rag", operations }, "PUT");
    expect((await put(granted)).status).toBe(200);
    try {
      write("annex/a.md", "Annex a: visiting hours on the weekend.");
      write("annex/b.md", "Annex b: the cafeteria closes at five.");
      const code = await runIngestCommand(
        [join(dir, "annex"), "--required-traits", "none", "--classification", "public"],
        {
          env: { TRAITGATE_URL: server.url, TRAITGATE_TOKEN: tokens.root },
          err: { write: () => true },
          out: { write: () => true },
        },
      );
      expect(code).toBe(0);
      const calls = await server.core.db.query<{ operation: string; outcome: string }>(
        `SELECT details->>'operation' AS operation, outcome FROM audit_events
          WHERE action = 'operator_call' ORDER BY seq DESC LIMIT 2`,
      );
      expect(calls.rows).toEqual([
        { operation: "rag_index", outcome: "success" },
        { operation: "rag_index", outcome: "success" },
      ]);
    } finally {
      expect((await put([...granted, "rag_index_batch"])).status).toBe(200);
    }
  });
});
