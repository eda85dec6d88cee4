import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { SearchService } from "../../gen/traitgate/search/v1/search_pb.js";
import { originOf, requestIdKey, staffPrincipal } from "../server/context.js";
import type { BackendRequest } from "./backend.js";
import type { RagStats } from "./module.js";
import type { Search, SearchCaller } from "./search.js";

/** Thin Connect handlers: parse → call the domain → map the result. */
export function createSearchService(
  search: Search,
  ragStats: (request: BackendRequest) => Promise<RagStats>,
): ServiceImpl<typeof SearchService> {
  return {
    async getRagStats(_req, ctx) {
      const stats = await ragStats({ requestId: requestId(ctx), origin: originOf(ctx.values) });
      return {
        backend: stats.backend,
        pluginId: stats.pluginId,
        reported: stats.counts !== undefined,
        documents: BigInt(stats.counts?.documents ?? 0),
        chunks: BigInt(stats.counts?.chunks ?? 0),
      };
    },
    async search(req, ctx) {
      const items = await search.search(caller(ctx), { q: req.q, topK: req.topK }, requestId(ctx));
      return { items };
    },
    async ingest(req, ctx) {
      const documents = await search.ingest(
        caller(ctx),
        req.documents.map((d) => ({
          path: d.path,
          title: d.title,
          content: d.content,
          requiredTraits: d.requiredTraits,
          classification: d.classification,
        })),
        requestId(ctx),
        { allowAccessChange: req.allowAccessChange },
      );
      return { documents };
    },
  };
}

function caller(ctx: HandlerContext): SearchCaller {
  const p = staffPrincipal(ctx.values);
  return { kind: p.kind, id: p.userId, roles: p.roles, origin: originOf(ctx.values) };
}

const requestId = (ctx: HandlerContext) => ctx.values.get(requestIdKey);

export { SearchService };
