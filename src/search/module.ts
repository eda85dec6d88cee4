import type { AuditWriter } from "../audit/index.js";
import { unavailable } from "../errors.js";
import type { Gateway } from "../gateway/gateway.js";
import type { Logger } from "../log.js";
import type { PolicyEngine } from "../policy/index.js";
import { createLocalEmbedder } from "../rag/local-embedder.js";
import { createRag, type Rag } from "../rag/rag.js";
import { prepareRagSchema } from "../rag/schema.js";
import { createRagStore } from "../rag/store.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { LiveSettings } from "../settings/live.js";
import type { Database } from "../storage/index.js";
import {
  type BackendRequest,
  type BackendStats,
  builtinBackend,
  indexEachDocument,
  pluginBackend,
  type RagBackend,
} from "./backend.js";
import { createIngestStore } from "./ingest-store.js";
import { createSearch, type Search } from "./search.js";
import { createSearchService, SearchService } from "./service.js";

export interface SearchModuleDeps {
  db: Database;
  audit: Pick<AuditWriter, "write">;
  log: Logger;
  gateway: Gateway;
  policy: () => PolicyEngine;
  settings: Pick<LiveSettings, "current">;
  /** Does a registered plugin's manifest declare this operation? */
  pluginDeclares: (pluginId: string, operation: string) => Promise<boolean>;
}

/** What GetRagStats answers: the chosen backend and its counts, if it reports them. */
export interface RagStats {
  backend: "builtin" | "plugin";
  pluginId: string;
  counts: BackendStats | undefined;
}

/** The built-in store's shape: the local embedder's default dimension and HNSW parameters. */
const builtin = {
  dimension: 1536,
  hnsw: { m: 16, efConstruction: 64, efSearch: 100, maxScanTuples: 20_000, exactThreshold: 2000 },
};

/** A backend that reports, on every call, why it cannot serve. */
const unusable = (why: string, cause: unknown): RagBackend => {
  const fail = async (): Promise<never> => {
    throw unavailable("RAG_BACKEND_UNAVAILABLE", why, { cause });
  };
  return { index: fail, indexMany: fail, query: fail, stats: fail };
};

/** How each method of SearchService is protected (also read by the OpenAPI generator). */
export const searchAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>([
  [`${SearchService.typeName}/Search`, requireAuth()],
  // The capability (capability:ingest) is checked by the domain, through the trait registry.
  [`${SearchService.typeName}/Ingest`, requireAuth()],
  [
    `${SearchService.typeName}/GetRagStats`,
    requireAuth({ roles: ["admin"], apiKeyScopes: ["plugins:read"] }),
  ],
]);

/** Wires search and ingestion: any signed-in caller searches; ingestion checks its capability. */
export function createSearchModule(deps: SearchModuleDeps): {
  module: ServiceModule;
  search: Search;
} {
  const log = deps.log.child({ area: "search" });
  // The built-in store is prepared on first use: a core whose backend is a plugin (or whose
  // PostgreSQL lacks pgvector) never creates its tables.
  let builtinStore: Promise<RagBackend> | undefined;
  const builtinBackendOnce = (): Promise<RagBackend> => {
    builtinStore ??= prepareRagSchema(deps.db, log, builtin).then(
      (): RagBackend => {
        const rag: Rag = createRag({
          store: createRagStore({ db: deps.db, tenant: "", hnsw: builtin.hnsw }),
          embedder: createLocalEmbedder({ dimension: builtin.dimension }),
        });
        return builtinBackend(rag);
      },
      (err: unknown) => {
        log.error({ err }, "the built-in RAG store cannot be prepared");
        // Not remembered: the next call tries again (the database may only have been down).
        builtinStore = undefined;
        return unusable(
          "the built-in RAG store is not available on this database (pgvector?)",
          err,
        );
      },
    );
    return builtinStore;
  };
  const lazyBuiltin: RagBackend = {
    index: async (doc, request, options) =>
      (await builtinBackendOnce()).index(doc, request, options),
    indexMany: async (docs, request, options) => {
      const backend = await builtinBackendOnce();
      if (backend.indexMany) return backend.indexMany(docs, request, options);
      return indexEachDocument(backend.index, docs, request, options);
    },
    query: async (input, request) => (await builtinBackendOnce()).query(input, request),
    stats: async (request) => (await builtinBackendOnce()).stats(request),
  };
  const chosen = (): { key: string; backend: RagBackend } => {
    const values = deps.settings.current().values;
    if (values["rag.backend"] === "plugin") {
      const pluginId = String(values["rag.plugin_id"] ?? "");
      if (pluginId === "") {
        return {
          key: "plugin:",
          backend: unusable("rag.backend is plugin but rag.plugin_id is empty", undefined),
        };
      }
      return {
        key: `plugin:${pluginId}`,
        backend: pluginBackend(deps.gateway, pluginId, deps.pluginDeclares),
      };
    }
    return { key: "builtin", backend: lazyBuiltin };
  };
  const search = createSearch({
    backend: chosen,
    policy: deps.policy,
    ingested: createIngestStore(deps.db),
    audit: deps.audit,
    log,
    topKDefault: () => Number(deps.settings.current().values["rag.top_k_default"] ?? 5) || 5,
  });
  const ragStats = async (request: BackendRequest): Promise<RagStats> => {
    const { key, backend } = chosen();
    const counts = await backend.stats(request);
    return {
      backend: key === "builtin" ? "builtin" : "plugin",
      pluginId: key.startsWith("plugin:") ? key.slice("plugin:".length) : "",
      counts,
    };
  };
  return {
    search,
    module: {
      services: [SearchService],
      register: (router) => router.service(SearchService, createSearchService(search, ragStats)),
      authRules: searchAuthRules,
    },
  };
}
