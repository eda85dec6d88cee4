import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuthRule } from "../../src/server/interceptors.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * gen/openapi.json against what a real core serves: every route the REST transcoder
 * answers is in the document and every operation of the document is a route it answers,
 * each with the same RPC and the same credentials (src/server/interceptors.ts rules).
 * The document is what GET /openapi.json answers. Issue 16 item 1.
 */

interface Operation {
  operationId: string;
  "x-grpc-method": string;
  security: Record<string, string[]>[];
}
type Document = { openapi: string; paths: Record<string, Record<string, Operation>> };

const committed = JSON.parse(
  readFileSync(new URL("../../gen/openapi.json", import.meta.url), "utf8"),
) as Document;

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});

afterAll(async () => {
  await server?.close();
});

/** "POST /a/{b}" for a route template: variables' patterns dropped, as in OpenAPI paths. */
const key = (method: string, template: string) =>
  `${method.toUpperCase()} ${template.replace(/\{([^}=]+)(=[^}]*)?\}/g, "{$1}")}`;

function documentOperations(doc: Document): Map<string, Operation> {
  const out = new Map<string, Operation>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) out.set(key(method, path), op);
  }
  return out;
}

/** The security requirement the document should state for a rule (public: none). */
function expectedSecurity(rule: AuthRule | undefined): Record<string, string[]>[] {
  const r = rule ?? { public: false, roles: [] };
  if (r.public) return r.readsBearer ? [{}, { bearerAuth: [] }] : [];
  return [
    {
      bearerAuth: [...r.roles],
      ...(r.apiKeyScopes?.length ? { apiKeyAuth: [...r.apiKeyScopes] } : {}),
    },
  ];
}

describe("GET /openapi.json", () => {
  it("answers the committed document as JSON with a cache header and an ETag", async () => {
    const res = await fetch(`${server.url}/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get("cache-control")).toMatch(/max-age=\d+/);
    const etag = res.headers.get("etag");
    expect(etag).toMatch(/^".+"$/);
    expect(await res.json()).toEqual(committed);
    expect(committed.openapi).toBe("3.1.0");

    const again = await fetch(`${server.url}/openapi.json`, {
      headers: { "if-none-match": etag ?? "" },
    });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe("");
  });

  it("answers only GET and HEAD (405 with Allow and an ErrorInfo)", async () => {
    const head = await fetch(`${server.url}/openapi.json`, { method: "HEAD" });
    expect(head.status).toBe(200);
    const post = await fetch(`${server.url}/openapi.json`, { method: "POST", body: "{}" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    const body = (await post.json()) as { details: { reason: string }[] };
    expect(body.details[0]?.reason).toBe("METHOD_NOT_ALLOWED");
  });
});

describe("gen/openapi.json and the transcoder's route table", () => {
  it("list the same routes, each for the same RPC", () => {
    const served = new Map(
      server.core.api.routes.map((r) => [
        key(r.method, r.template),
        r.rpc.replace(/\.([^.]+)$/, "/$1"),
      ]),
    );
    const documented = documentOperations(committed);
    const missingFromDocument = [...served.keys()].filter((k) => !documented.has(k));
    const notServed = [...documented.keys()].filter((k) => !served.has(k));
    expect(missingFromDocument, "served but not in gen/openapi.json").toEqual([]);
    expect(notServed, "in gen/openapi.json but not served").toEqual([]);
    for (const [k, rpc] of served) expect(documented.get(k)?.["x-grpc-method"], k).toBe(rpc);
    expect(served.size).toBeGreaterThan(40);
  });

  it("state for each operation the credentials the server asks for", () => {
    const rules = server.core.api.authRules;
    for (const [k, op] of documentOperations(committed)) {
      expect(op.security, k).toEqual(expectedSecurity(rules.get(op["x-grpc-method"])));
    }
    // Spot checks of what the rules say (docs/api.md).
    const ops = documentOperations(committed);
    expect(ops.get("POST /auth/login")?.security).toEqual([]);
    expect(ops.get("GET /auth/validate")?.security).toEqual([{}, { bearerAuth: [] }]);
    expect(ops.get("POST /api/policy/evaluate")?.security).toEqual([{ bearerAuth: [] }]);
    expect(ops.get("GET /api/admin/settings")?.security).toEqual([
      { bearerAuth: ["admin", "auditor"], apiKeyAuth: ["settings:read"] },
    ]);
  });
});
