import type { ServiceImpl } from "@connectrpc/connect";
import {
  type Chunk,
  type Document,
  type IndexRequest,
  RagPluginService,
} from "../../gen/traitgate/rag/v1/rag_pb.js";
import type { IndexInput, Rag } from "./rag.js";

export { RagPluginService };

/** Thin Connect handlers of the RAG plugin: parse → call the domain → map the result. */
export function createRagPluginService(
  rag: Rag,
  describe: { dimension: number; embedder: string; tenant: string },
): ServiceImpl<typeof RagPluginService> {
  return {
    async index(req, ctx) {
      const { docId, chunks } = await rag.index(indexInput(req), ctx.signal);
      return { ok: true, docId, chunks };
    },
    async indexBatch(req, ctx) {
      const written = await rag.indexBatch(
        {
          classification: req.classification,
          documents: req.documents.map((d) => ({
            document: d.document && documentOf(d.document),
            chunks: d.chunks.map(chunkOf),
          })),
          allowAccessChange: req.allowAccessChange,
        },
        ctx.signal,
      );
      return { documents: written.map(({ docId, chunks }) => ({ ok: true, docId, chunks })) };
    },
    async query(req, ctx) {
      const items = await rag.query(
        { q: req.q, vector: req.vector, topK: req.topK, userTraits: req.userTraits },
        ctx.signal,
      );
      return { items };
    },
    async delete(req) {
      const { docId, chunks } = await rag.delete(req.docId);
      return { ok: true, docId, chunks };
    },
    async stats() {
      const { documents, chunks } = await rag.stats();
      return {
        documents: BigInt(documents),
        chunks: BigInt(chunks),
        dimension: describe.dimension,
        embedder: describe.embedder,
        tenant: describe.tenant,
      };
    },
  };
}

function indexInput(req: IndexRequest): IndexInput {
  const d = req.document;
  return {
    id: req.id,
    title: req.title,
    path: req.path,
    content: req.content,
    requiredTraits: req.requiredTraits,
    classification: req.classification,
    vector: req.vector,
    document: d === undefined ? undefined : documentOf(d),
    chunks: req.chunks.map(chunkOf),
    allowAccessChange: req.allowAccessChange,
  };
}

const documentOf = (d: Document) => ({
  id: d.id,
  title: d.title,
  path: d.path,
  requiredTraits: d.requiredTraits,
  classification: d.classification,
});

const chunkOf = (c: Chunk) => ({ chunkNo: c.chunkNo, content: c.content, vector: c.vector });
