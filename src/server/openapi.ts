import { createHash } from "node:crypto";
import { Code } from "@connectrpc/connect";
import document from "../../gen/openapi.json" with { type: "json" };
import type { NodeRequest, NodeResponse } from "./app.js";
import { RestError, restErrorResponse } from "./transcoder/errors.js";

/** Where the core serves its OpenAPI document (gen/openapi.json, docs/api.md). */
export const openApiPath = "/openapi.json";

/**
 * Answers `GET /openapi.json` with the document `npm run generate` wrote from proto/: JSON,
 * cacheable for five minutes, revalidated by its ETag (it changes only with the build).
 */
export function createOpenApiEndpoint(
  doc: unknown = document,
): (req: NodeRequest, res: NodeResponse) => number {
  const body = Buffer.from(JSON.stringify(doc));
  const etag = `"${createHash("sha256").update(body).digest("base64url").slice(0, 32)}"`;
  const headers = {
    "content-type": "application/json",
    "cache-control": "public, max-age=300",
    etag,
  };
  return (req, res) => {
    if (req.method !== "GET" && req.method !== "HEAD") {
      const answer = restErrorResponse(
        new RestError(
          405,
          Code.Unimplemented,
          "METHOD_NOT_ALLOWED",
          `${req.method} is not allowed here; allowed: GET, HEAD`,
        ),
      );
      res.writeHead(405, { "content-type": "application/json", allow: "GET, HEAD" });
      res.end(answer.body);
      return 405;
    }
    const tags = req.headers["if-none-match"];
    if (tags?.split(",").some((t) => t.trim() === etag || t.trim() === "*")) {
      res.writeHead(304, { "cache-control": headers["cache-control"], etag });
      res.end();
      return 304;
    }
    res.writeHead(200, { ...headers, "content-length": String(body.length) });
    if (req.method === "HEAD") res.end();
    else res.end(body);
    return 200;
  };
}
