import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import type { Logger } from "../log.js";
import type { Core } from "../platform.js";
import { loadRagConfig } from "../rag/config.js";
import { type RagPlugin, startRagPlugin } from "../rag/plugin.js";
import { filesUnder } from "../search/ingest-command.js";

/**
 * The demo's retrieval, wired as the setup guide describes (docs/operator-lane.md): the RAG
 * plugin on its own port with its own embedded database, registered (in HIPAA scope),
 * allowlisted for `ai-core`, chosen in the settings (rag.backend = plugin), and the sample
 * corpus (examples/corpus) ingested with different required traits per folder. Idempotent:
 * a second start re-issues the plugin's secrets and skips unchanged documents.
 */

export interface DemoRetrieval {
  plugin: RagPlugin;
  pluginUrl: string;
  ingested: { documents: number; indexed: number };
}

const pluginId = "rag";
const system = { kind: "system" as const, id: "" };
const meta = () => ({ requestId: `demo-${randomBytes(6).toString("hex")}` });

/** Folder of examples/corpus → what its documents require and how they are classified. */
export const corpusFolders = [
  { folder: "public", requiredTraits: [], classification: "public" },
  { folder: "staff", requiredTraits: ["role:viewer"], classification: "internal" },
  { folder: "clinical", requiredTraits: ["role:clinician"], classification: "internal" },
  { folder: "records", requiredTraits: ["role:clinician"], classification: "phi" },
] as const;

export async function setUpDemoRetrieval(
  core: Core,
  options: { dataDir: string; port: number; corpusDir: string; log: Logger },
): Promise<DemoRetrieval> {
  const manifest = {
    id: pluginId,
    name: "RAG plugin (demo)",
    pluginType: "retrieval",
    endpoints: {
      rag_index: "/rag/index",
      rag_index_batch: "/rag/index-batch",
      rag_query: "/rag/query",
    },
    host: "127.0.0.1",
    port: options.port,
    // The demo plugin stores health records: it is declared in HIPAA scope.
    traits: ["compliance:hipaa"],
  };
  let credentials: { credential: string; coreSecret: string };
  if (await core.plugins.exists(pluginId)) {
    await core.plugins.update(system, meta(), manifest, false);
    ({ credentials } = await core.plugins.rotateCredentials(system, meta(), pluginId));
  } else {
    ({ credentials } = await core.plugins.register(system, meta(), manifest, false));
  }
  const plugin = await startRagPlugin({
    config: loadRagConfig({
      CORE_SECRET: credentials.coreSecret,
      PORT: String(options.port),
      HOST: "127.0.0.1",
      DATA_DIR: options.dataDir,
      LOG_LEVEL: "warn",
    }),
    log: options.log.child({ area: "rag-plugin" }),
  });
  try {
    if (options.port === 0) {
      // Port 0 (tests): the manifest learns the port the plugin got.
      await core.plugins.update(system, meta(), { ...manifest, port: plugin.server.port }, false);
    }
    // The core calls as ai-core: a service account of that name makes it an allowlist caller.
    if (!(await core.serviceAccounts.exists("ai-core"))) {
      await core.serviceAccounts.create({ userId: "", kind: "system" }, meta(), {
        name: "ai-core",
        description: "the platform's AI core (demo)",
        roles: ["service"],
      });
    }
    await core.allowlist.put(system, meta(), {
      caller: "ai-core",
      target: pluginId,
      operations: ["rag_index", "rag_index_batch", "rag_query"],
    });
    await core.settingsAdmin.update(
      { kind: "system", userId: "demo", username: "demo", apiKeyId: undefined },
      meta(),
      { values: { "rag.backend": "plugin", "rag.plugin_id": pluginId } },
    );
    await core.settings.refresh();
    let documents = 0;
    let indexed = 0;
    for (const { folder, requiredTraits, classification } of corpusFolders) {
      const root = join(options.corpusDir, folder);
      const files = await filesUnder(root);
      const docs = await Promise.all(
        files.map(async (file) => ({
          path: `${folder}/${relative(root, file).split(sep).join("/")}`,
          title: "",
          content: await readFile(file, "utf8"),
          requiredTraits,
          classification,
        })),
      );
      const results = await core.search.ingest(
        { kind: "system", id: "", roles: ["admin"] },
        docs,
        meta().requestId,
      );
      documents += results.length;
      indexed += results.filter((r) => !r.skipped).length;
    }
    return { plugin, pluginUrl: plugin.server.url, ingested: { documents, indexed } };
  } catch (err) {
    await plugin.close().catch(() => undefined);
    throw err;
  }
}
