import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { createRegistry, type JsonObject } from "@bufbuild/protobuf";
import { createConnectRouter } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { PolicyService } from "../../gen/traitgate/policy/v1/policy_pb.js";
import { TranscodingTestService } from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { buildOpenApi } from "../../src/openapi/document.js";
import { requireAuth } from "../../src/server/interceptors.js";
import { createRestTranscoder } from "../../src/server/transcoder/index.js";
import { UnaryMethods } from "../../src/server/unary.js";
import {
  createResponseValidator,
  openApiProblems,
  type ResponseProblems,
} from "../support/openapi.js";

/**
 * The generator (src/openapi/) on the transcoder's test service, whose echo answers carry
 * every kind of field: what the document says is what the transcoder reads and answers
 * (int64 as strings, enums by name, Timestamp, wrappers, bytes, maps), and every query
 * parameter it lists is one the transcoder accepts.
 */

const service = TranscodingTestService;
const document = buildOpenApi({
  services: [service],
  authRules: new Map([[`${service.typeName}/CreateBook`, requireAuth({ roles: ["admin"] })]]),
  comments: { of: (d) => (d.kind === "rpc" ? `The ${d.name} method.` : undefined) },
  version: "test",
});

const methods = new UnaryMethods([]);
methods.recording(createConnectRouter()).service(service, {
  getShelf: (request) => ({ request }),
  getDefaultShelf: (request) => ({ request }),
  browseShelf: (request) => ({ request }),
  getBook: (request) => ({ request }),
  updateBook: (request) => ({ request }),
  createBook: (request) => ({ request }),
  searchBooks: (request) => ({ request }),
  archiveBook: (request) => ({ request }),
  fail: () => ({}),
  whoAmI: () => ({}),
});
const rest = createRestTranscoder({
  methods,
  registry: createRegistry(file_google_rpc_error_details),
  maxBodyBytes: 64 * 1024,
});

let server: http.Server;
let base = "";
let problems: ResponseProblems;

beforeAll(async () => {
  problems = await createResponseValidator(document);
  server = http.createServer(rest);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

async function call(method: string, path: string, body?: unknown) {
  const res = await fetch(base + path, {
    method,
    ...(body === undefined
      ? {}
      : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
  });
  return { status: res.status, body: (await res.json()) as JsonObject };
}

type Operation = {
  operationId: string;
  parameters?: { name: string; in: string; schema: JsonObject }[];
  security: unknown[];
  description: string;
};
const paths = document.paths as Record<string, Record<string, Operation>>;
const components = (document.components as { schemas: Record<string, JsonObject> }).schemas;

describe("the generated document", () => {
  it("is valid OpenAPI 3.1", async () => {
    expect(await openApiProblems(document)).toEqual([]);
  });

  it("has an operation per binding, path patterns dropped, additional bindings numbered", () => {
    expect(Object.keys(paths).sort()).toEqual([
      "/v1/books",
      "/v1/fail",
      "/v1/shelves/default",
      "/v1/shelves/{path}",
      "/v1/shelves/{shelf}",
      "/v1/shelves/{shelf}/books",
      "/v1/shelves/{shelf}/request",
      "/v1/whoami",
      "/v1/{book.name}",
      "/v1/{name}",
      "/v1/{name}:archive",
    ]);
    expect(paths["/v1/books"]?.post?.operationId).toBe("TranscodingTestService_CreateBook_2");
    expect(paths["/v1/shelves/{shelf}/books"]?.post?.operationId).toBe(
      "TranscodingTestService_CreateBook",
    );
    expect(paths["/v1/books"]?.get?.description).toContain("The SearchBooks method.");
  });

  it("states the protection of each operation from its rule (none: bearer, fail closed)", () => {
    expect(paths["/v1/books"]?.post?.security).toEqual([{ bearerAuth: ["admin"] }]);
    expect(paths["/v1/books"]?.get?.security).toEqual([{ bearerAuth: [] }]);
  });

  it("maps proto JSON: int64 as string, enums by name, Timestamp, bytes, maps", () => {
    const book = components["traitgate.testing.v1.Book"] as {
      properties: Record<string, JsonObject>;
      required: string[];
    };
    expect(book.properties.page_count).toMatchObject({ type: "string", format: "int64" });
    expect(book.properties.genre).toMatchObject({
      type: "string",
      enum: ["GENRE_UNSPECIFIED", "GENRE_FICTION", "GENRE_HISTORY"],
    });
    expect(book.properties.published_at).toMatchObject({ type: "string", format: "date-time" });
    // Implicit presence: always answered. Messages and Timestamps only when set.
    expect(book.required).toEqual(["name", "title", "page_count", "available", "tags", "genre"]);
    const search = components["traitgate.testing.v1.SearchBooksRequest"] as {
      properties: Record<string, JsonObject>;
    };
    expect(search.properties.cursor).toMatchObject({ type: "string", contentEncoding: "base64" });
    expect(search.properties.labels).toMatchObject({
      type: "object",
      additionalProperties: { type: "string" },
    });
    expect(search.properties.max_pages).toMatchObject({ type: "integer", format: "int32" });
  });
});

describe("request schemas carry the protovalidate rules the server enforces", () => {
  const core = buildOpenApi({
    services: [IdentityService, PolicyService, AuditService],
    authRules: new Map(),
    comments: { of: () => undefined },
    version: "test",
  });
  const schemas = (core.components as { schemas: Record<string, JsonObject> }).schemas;
  const props = (name: string) =>
    (schemas[name] as { properties: Record<string, JsonObject> }).properties;

  it("lengths, patterns, list sizes and required fields; answers stay unconstrained", () => {
    expect(props("traitgate.identity.v1.LoginRequest").username).toMatchObject({
      minLength: 1,
      maxLength: 128,
    });
    expect(props("traitgate.policy.v1.EvaluateRequest").context).toMatchObject({
      pattern: "^[A-Z][A-Z0-9_]{0,63}$",
    });
    expect(props("traitgate.policy.v1.EvaluateRequest").traits).toMatchObject({ maxItems: 256 });
    expect(schemas["traitgate.policy.v1.SanitizeRequest"]?.required).toEqual(["document"]);
    expect(props("traitgate.identity.v1.LoginResponse").token).toEqual({
      type: "string",
    });
  });

  it("rules ignored on the zero value let the zero value through", () => {
    const paths = core.paths as Record<string, Record<string, Operation>>;
    const action = paths["/api/admin/audit"]?.get?.parameters?.find((p) => p.name === "action");
    expect(action?.schema).toMatchObject({
      anyOf: [{ const: "" }, { pattern: "^[a-z][a-z0-9_.:-]{0,127}$" }],
    });
  });
});

describe("the transcoder's answers conform to it", () => {
  it("SearchBooks: every listed query parameter is accepted, and the echo conforms", async () => {
    const params = paths["/v1/books"]?.get?.parameters ?? [];
    expect(params.map((p) => p.name)).toEqual([
      "query",
      "page_size",
      "min_pages",
      "available_only",
      "genre",
      "tags",
      "author.name",
      "author.country",
      "published_after",
      "max_pages",
      "cursor",
    ]);
    const sample: Record<string, string> = {
      page_size: "3",
      min_pages: "12345678901234",
      available_only: "true",
      genre: "GENRE_HISTORY",
      published_after: "2026-01-02T03:04:05Z",
      max_pages: "7",
      cursor: "AQI=",
    };
    const query = new URLSearchParams(
      params.map((p): [string, string] => [p.name, sample[p.name] ?? "x"]),
    );
    query.append("tags", "y");
    const answer = await call("GET", `/v1/books?${query}`);
    expect(answer.status).toBe(200);
    expect(answer.body.request).toMatchObject({
      min_pages: "12345678901234",
      genre: "GENRE_HISTORY",
      published_after: "2026-01-02T03:04:05Z",
      max_pages: 7,
      cursor: "AQI=",
      tags: ["x", "y"],
      labels: {},
    });
    expect(problems("TranscodingTestService_SearchBooks", answer.status, answer.body)).toEqual([]);
    const empty = await call("GET", "/v1/books");
    expect(problems("TranscodingTestService_SearchBooks", empty.status, empty.body)).toEqual([]);
  });

  it("CreateBook (body *), UpdateBook (body field), response_body, and an error", async () => {
    const book = {
      name: "shelves/s/books/b",
      title: "T",
      page_count: "300",
      available: true,
      author: { name: "A", country: "NO" },
      tags: ["t"],
      published_at: "2026-01-02T03:04:05Z",
      genre: "GENRE_FICTION",
    };
    const created = await call("POST", "/v1/shelves/s/books", { book, request_id: "r" });
    expect(created.status).toBe(200);
    expect(problems("TranscodingTestService_CreateBook", 200, created.body)).toEqual([]);
    const updated = await call("PATCH", "/v1/shelves/s/books/b", { title: "U" });
    expect(problems("TranscodingTestService_UpdateBook", 200, updated.body)).toEqual([]);
    const echoed = await call("GET", "/v1/shelves/s/request");
    expect(echoed.body).toEqual({ shelf: "s" });
    expect(problems("TranscodingTestService_GetShelf_2", 200, echoed.body)).toEqual([]);
    const refused = await call("GET", "/v1/books?nope=1");
    expect(refused.status).toBe(400);
    expect(problems("TranscodingTestService_SearchBooks", 400, refused.body)).toEqual([]);
    // The checks can fail: a number where the document says int64 string, an extra field.
    const bent = { request: { ...(created.body.request as JsonObject), shelf: 1 } };
    expect(problems("TranscodingTestService_CreateBook", 200, bent)).not.toEqual([]);
    const extra = { ...created.body, requestId: "r" };
    expect(problems("TranscodingTestService_CreateBook", 200, extra)).not.toEqual([]);
  });
});
