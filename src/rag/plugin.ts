import type { Logger } from "../log.js";
import { createApp } from "../server/app.js";
import { requireAuth } from "../server/interceptors.js";
import { listen, type RunningServer } from "../server/listener.js";
import { type Database, openDatabase } from "../storage/index.js";
import { type RagConfig, ragDatabaseDir } from "./config.js";
import { createCoreSecretAuthenticator } from "./core-secret.js";
import { createEmbedder, type Embedder } from "./embedder.js";
import { createRag, type Rag } from "./rag.js";
import { prepareRagSchema } from "./schema.js";
import { createRagPluginService, RagPluginService } from "./service.js";
import { createRagStore } from "./store.js";

export interface RagPlugin {
  server: RunningServer;
  db: Database;
  rag: Rag;
  close(): Promise<void>;
}

export interface StartRagPluginOptions {
  config: RagConfig;
  log: Logger;
  /** An already open database (tests); otherwise DB_CONNECTION or the embedded one. */
  db?: Database;
  /** Another embedder (tests); otherwise the one the configuration names. */
  embedder?: Embedder;
}

/** Opens and prepares the plugin's database, then serves RagPluginService on PORT. */
export async function startRagPlugin(options: StartRagPluginOptions): Promise<RagPlugin> {
  const { config, log } = options;
  const db =
    options.db ??
    (await openDatabase({
      connection: config.dbConnection,
      dataDir: ragDatabaseDir(config),
      log,
    }));
  try {
    await prepareRagSchema(db, log, {
      dimension: config.dimension,
      hnsw: config.hnsw,
      buildIndex: !config.deferIndex,
    });
    if (config.deferIndex) {
      log.warn(
        "RAG_DEFER_INDEX: bulk load mode, no HNSW index is built now (queries rank every allowed chunk); restart without it to build the index",
      );
    }
    const embedder = options.embedder ?? createEmbedder(config, log);
    const store = createRagStore({ db, tenant: config.tenant, hnsw: config.hnsw });
    const rag = createRag({ store, embedder });
    const service = createRagPluginService(rag, {
      dimension: config.dimension,
      embedder: embedder.name,
      tenant: config.tenant,
    });
    const { listener } = createApp({
      modules: [
        {
          services: [RagPluginService],
          register: (router) => router.service(RagPluginService, service),
          // Every method: the core's secret (the authenticator accepts nothing else).
          authRules: new Map(
            RagPluginService.methods.map((m) => [
              `${RagPluginService.typeName}/${m.name}`,
              requireAuth(),
            ]),
          ),
        },
      ],
      authenticator: createCoreSecretAuthenticator(config.coreSecret),
      health: {
        check: () =>
          db.ping(1000).then(
            () => "SERVING" as const,
            () => "NOT_SERVING" as const,
          ),
      },
      log,
      maxBodyBytes: config.maxBodyBytes,
    });
    const server = await listen(listener, {
      port: config.port,
      host: config.host,
      tls: config.tls,
    });
    log.info(
      {
        url: server.url,
        address: server.address,
        db: db.kind,
        dimension: config.dimension,
        embedder: embedder.name,
        tenant: config.tenant || undefined,
      },
      "traitgate rag-plugin listening",
    );
    return {
      server,
      db,
      rag,
      async close() {
        await server.close();
        await db.close();
      },
    };
  } catch (err) {
    if (options.db === undefined) await db.close().catch(() => {});
    throw err;
  }
}
