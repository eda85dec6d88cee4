import * as http from "node:http";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { createRegistry, fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextKey,
  createContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import { codeFromString } from "@connectrpc/connect/protocol-connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ErrorInfoSchema,
  file_google_rpc_error_details,
} from "../../gen/google/rpc/error_details_pb.js";
import {
  AuthorSchema,
  TranscodingTestService,
} from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { createRestTranscoder } from "../../src/server/transcoder/index.js";
import { UnaryMethods } from "../../src/server/unary.js";

const clientKey = createContextKey("", { description: "test client" });
const maxBodyBytes = 1024;

/** An interceptor on the router: its header must show up on REST answers. */
const tagRpc: Interceptor = (next) => async (req) => {
  const res = await next(req);
  res.header.set("x-rpc", req.method.name);
  return res;
};

const methods = new UnaryMethods([tagRpc]);
methods.recording(createConnectRouter({ interceptors: [tagRpc] })).service(TranscodingTestService, {
  getShelf: (request) => ({ request }),
  getDefaultShelf: (request) => ({ request }),
  browseShelf: (request) => ({ request }),
  getBook: (request) => ({ request }),
  updateBook: (request) => ({ request }),
  createBook: (request) => ({ request }),
  searchBooks: (request) => ({ request }),
  archiveBook: (request) => ({ request }),
  fail(request) {
    throw new ConnectError(
      request.message,
      codeFromString(request.code) ?? Code.Unknown,
      undefined,
      [
        {
          desc: ErrorInfoSchema,
          value: { reason: request.reason, domain: "traitgate", metadata: { k: "v" } },
        },
        // Not in the transcoder's registry: sent as opaque bytes.
        { desc: AuthorSchema, value: { name: "hidden" } },
      ],
    );
  },
  whoAmI(_request, ctx) {
    ctx.responseTrailer.set("x-trailer", "t");
    return {
      authorization: ctx.requestHeader.get("authorization") ?? "",
      client: ctx.values.get(clientKey),
      requestMethod: ctx.requestMethod,
    };
  },
});

const rest = createRestTranscoder({
  methods,
  registry: createRegistry(file_google_rpc_error_details),
  maxBodyBytes,
  contextValues: (req) =>
    createContextValues().set(clientKey, String(req.headers["x-client"] ?? "")),
});

let server: http.Server;
let base: string;

beforeAll(async () => {
  server = http.createServer(rest);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

interface Answer {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: JSON bodies are checked by shape
  json: any;
}

async function call(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers = { "content-type": "application/json", ...headers };
  }
  const res = await fetch(base + path, init);
  expect(res.headers.get("content-type")).toBe("application/json");
  return { status: res.status, headers: res.headers, json: await res.json() };
}

function errorInfo(answer: Answer): {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
} {
  return answer.json.details.find(
    (d: { "@type": string }) => d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo",
  );
}

describe("path templates", () => {
  it("binds a single-segment variable, percent-decoded", async () => {
    const a = await call("GET", "/v1/shelves/a%2Fb%20c");
    expect(a.status).toBe(200);
    expect(a.headers.get("x-rpc")).toBe("GetShelf");
    expect(a.json).toEqual({ request: { shelf: "a/b c" } });
  });

  it("prefers the literal /v1/shelves/default to {shelf}", async () => {
    const a = await call("GET", "/v1/shelves/default");
    expect(a.headers.get("x-rpc")).toBe("GetDefaultShelf");
    expect(a.json).toEqual({ request: {} });
  });

  it("binds shelves/*/books/* to name, before the ** route", async () => {
    const a = await call("GET", "/v1/shelves/s1/books/b1");
    expect(a.headers.get("x-rpc")).toBe("GetBook");
    expect(a.json).toEqual({ request: { name: "shelves/s1/books/b1" } });
  });

  it("binds ** to the rest of the path, keeping slashes and %2F", async () => {
    const a = await call("GET", "/v1/shelves/a/b%2Fc/d%20e");
    expect(a.headers.get("x-rpc")).toBe("BrowseShelf");
    expect(a.json).toEqual({ request: { path: "a/b%2Fc/d e" } });
  });

  it("serves an additional binding with response_body", async () => {
    const a = await call("GET", "/v1/shelves/s1/request");
    expect(a.headers.get("x-rpc")).toBe("GetShelf");
    expect(a.json).toEqual({ shelf: "s1" });
  });

  it("serves a custom verb", async () => {
    const a = await call("POST", "/v1/shelves/s1/books/b1:archive", { note: "old" });
    expect(a.headers.get("x-rpc")).toBe("ArchiveBook");
    expect(a.json).toEqual({ request: { name: "shelves/s1/books/b1", note: "old" } });
  });
});

describe("request bodies", () => {
  it("binds body to one field, the path to a nested field (path wins), and a FieldMask query", async () => {
    const a = await call("PATCH", "/v1/shelves/s1/books/b1?update_mask=title,pageCount", {
      name: "ignored",
      title: "Dune",
      pageCount: 412,
    });
    expect(a.status).toBe(200);
    expect(a.json.request.book).toMatchObject({
      name: "shelves/s1/books/b1",
      title: "Dune",
      page_count: "412",
    });
    expect(a.json.request.update_mask).toBe("title,pageCount");
  });

  it('maps body "*" to the whole request; the path wins over the body', async () => {
    const a = await call("POST", "/v1/shelves/s1/books", {
      shelf: "other",
      book: { title: "T" },
      requestId: "r1",
    });
    expect(a.headers.get("x-rpc")).toBe("CreateBook");
    expect(a.json.request).toMatchObject({ shelf: "s1", request_id: "r1", book: { title: "T" } });
  });

  it("accepts snake_case and lowerCamel input alike", async () => {
    const snake = await call("POST", "/v1/books", { request_id: "a", book: { page_count: "7" } });
    const camel = await call("POST", "/v1/books", { requestId: "a", book: { pageCount: "7" } });
    expect(snake.json).toEqual(camel.json);
    expect(snake.json.request).toMatchObject({ request_id: "a", book: { page_count: "7" } });
  });

  it("treats an empty body as an empty message, with defaults emitted in snake_case", async () => {
    const res = await fetch(`${base}/v1/books`, { method: "POST" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ request: { shelf: "", request_id: "" } });
  });

  it("accepts application/json with a charset", async () => {
    const a = await call("POST", "/v1/books", "{}", {
      "content-type": "application/json; charset=utf-8",
    });
    expect(a.status).toBe(200);
  });

  it("answers 415 to a body that is not JSON", async () => {
    const a = await call("POST", "/v1/books", "{}", { "content-type": "text/plain" });
    expect(a.status).toBe(415);
    expect(a.json.code).toBe("invalid_argument");
    expect(errorInfo(a).reason).toBe("UNSUPPORTED_MEDIA_TYPE");
  });

  it("answers 400 MALFORMED_JSON to broken JSON", async () => {
    const a = await call("POST", "/v1/books", "{");
    expect(a.status).toBe(400);
    expect(a.json.code).toBe("invalid_argument");
    expect(a.json.message).toMatch(/not valid JSON/);
    expect(errorInfo(a)).toMatchObject({ reason: "MALFORMED_JSON", domain: "traitgate" });
  });

  it("answers 400 UNKNOWN_FIELD naming an unknown body field", async () => {
    const a = await call("POST", "/v1/books", { book: { titel: "x" } });
    expect(a.status).toBe(400);
    expect(errorInfo(a)).toMatchObject({ reason: "UNKNOWN_FIELD", metadata: { field: "titel" } });
  });

  it("answers 400 INVALID_FIELD naming a body field with a bad value", async () => {
    const a = await call("POST", "/v1/books", { book: { page_count: "many" } });
    expect(a.status).toBe(400);
    expect(errorInfo(a)).toMatchObject({
      reason: "INVALID_FIELD",
      metadata: { field: "page_count" },
    });
  });

  it.each([
    [
      { book: { author: "Ada" } },
      "book.author",
      'expected an object {"name": "...", "country": "..."}',
    ],
    [{ book: { tags: "x" } }, "book.tags", "expected an array of strings, got a string"],
    [{ book: { tags: ["x", 2] } }, "book.tags[1]", "expected a string, got a number"],
    [{ book: { genre: "POEMS" } }, "book.genre", "expected one of GENRE_UNSPECIFIED"],
    [{ book: { published_at: 5 } }, "book.published_at", "expected a time string"],
    [{ book: ["x"] }, "book", 'expected an object {"name": "...", "title": "...", "page_count": 0'],
  ])(
    "answers 400 INVALID_FIELD naming the path of a value of the wrong shape: %j",
    async (body, field, says) => {
      const a = await call("POST", "/v1/books", body);
      expect(a.status).toBe(400);
      expect(errorInfo(a)).toMatchObject({ reason: "INVALID_FIELD", metadata: { field } });
      expect(a.json.message).toContain(`${field}: ${says}`);
    },
  );

  it("refuses query parameters when the body is the whole request", async () => {
    const a = await call("POST", "/v1/books?shelf=x", {});
    expect(a.status).toBe(400);
    expect(errorInfo(a)).toMatchObject({
      reason: "UNKNOWN_QUERY_PARAMETER",
      metadata: { field: "shelf" },
    });
  });

  it("answers 413 to a body over the limit, by Content-Length", async () => {
    const a = await call("POST", "/v1/books", { request_id: "x".repeat(maxBodyBytes) });
    expect(a.status).toBe(413);
    expect(a.json.code).toBe("resource_exhausted");
    expect(errorInfo(a).reason).toBe("BODY_TOO_LARGE");
  });

  it("answers 413 to a chunked body once it passes the limit", async () => {
    const { port } = server.address() as AddressInfo;
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        { port, host: "127.0.0.1", method: "POST", path: "/v1/books" },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => (body += c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on("error", reject);
      req.setHeader("content-type", "application/json");
      req.write(`{"request_id": "${"x".repeat(maxBodyBytes)}`);
      req.end(`"}`);
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body).details[0].reason).toBe("BODY_TOO_LARGE");
  });
});

describe("query parameters", () => {
  it("sets scalars, enums, repeated, nested, Timestamp, wrapper and bytes fields", async () => {
    const query = [
      "query=dune",
      "pageSize=10",
      "min_pages=42",
      "available_only=true",
      "genre=GENRE_FICTION",
      "tags=a",
      "tags=b",
      "author.name=Frank",
      "published_after=2020-01-02T03:04:05Z",
      "max_pages=500",
      "cursor=AQI",
    ].join("&");
    const a = await call("GET", `/v1/books?${query}`);
    expect(a.status).toBe(200);
    expect(a.headers.get("x-rpc")).toBe("SearchBooks");
    expect(a.json.request).toEqual({
      query: "dune",
      page_size: 10,
      min_pages: "42",
      available_only: true,
      genre: "GENRE_FICTION",
      tags: ["a", "b"],
      author: { name: "Frank", country: "" },
      published_after: "2020-01-02T03:04:05Z",
      max_pages: 500,
      cursor: "AQI=",
      labels: {},
    });
  });

  it('emits default values: false, 0, "", [] and int64 as a string', async () => {
    const a = await call("GET", "/v1/books?genre=2");
    expect(a.json.request).toEqual({
      query: "",
      page_size: 0,
      min_pages: "0",
      available_only: false,
      genre: "GENRE_HISTORY",
      tags: [],
      cursor: "",
      labels: {},
    });
  });

  it.each([
    ["colour=red", "UNKNOWN_QUERY_PARAMETER", "colour"],
    ["author.nickname=x", "UNKNOWN_QUERY_PARAMETER", "author.nickname"],
    ["page_size=abc", "INVALID_FIELD", "page_size"],
    ["page_size=1&page_size=2", "INVALID_FIELD", "page_size"],
    ["author=x", "INVALID_FIELD", "author"],
    ["labels=x", "INVALID_FIELD", "labels"],
    ["published_after=yesterday", "INVALID_FIELD", "published_after"],
  ])("answers 400 to ?%s", async (query, reason, field) => {
    const a = await call("GET", `/v1/books?${query}`);
    expect(a.status).toBe(400);
    expect(a.json.code).toBe("invalid_argument");
    expect(errorInfo(a)).toMatchObject({ reason, domain: "traitgate", metadata: { field } });
  });

  it("refuses a query parameter for a field the body binds", async () => {
    const a = await call("PATCH", "/v1/shelves/s1/books/b1?book.title=x", {});
    expect(a.status).toBe(400);
    expect(errorInfo(a)).toMatchObject({
      reason: "INVALID_FIELD",
      metadata: { field: "book.title" },
    });
  });
});

describe("routing errors", () => {
  it("answers 404 NOT_FOUND when no template matches", async () => {
    const a = await call("GET", "/nothing/here");
    expect(a.status).toBe(404);
    expect(a.json).toMatchObject({ code: "not_found" });
    expect(errorInfo(a)).toMatchObject({ reason: "NOT_FOUND", domain: "traitgate" });
  });

  it("answers 405 with Allow when templates match for other methods only", async () => {
    const a = await call("PUT", "/v1/shelves/s1/books/b1", {});
    expect(a.status).toBe(405);
    expect(a.headers.get("allow")).toBe("GET, PATCH");
    expect(a.json.code).toBe("unimplemented");
    expect(errorInfo(a).reason).toBe("METHOD_NOT_ALLOWED");
  });
});

describe("handlers", () => {
  it("maps a handler's error to its HTTP status and REST body, details as JSON", async () => {
    const a = await call("POST", "/v1/fail", {
      code: "permission_denied",
      reason: "X",
      message: "nope",
    });
    expect(a.status).toBe(403);
    expect(a.json).toEqual({
      code: "permission_denied",
      message: "nope",
      details: [
        {
          "@type": "type.googleapis.com/google.rpc.ErrorInfo",
          reason: "X",
          domain: "traitgate",
          metadata: { k: "v" },
        },
        { "@type": "type.googleapis.com/traitgate.testing.v1.Author", value: expect.any(String) },
      ],
    });
    const opaque = fromBinary(AuthorSchema, base64Decode(a.json.details[1].value));
    expect(opaque.name).toBe("hidden");
  });

  it.each([
    ["not_found", 404],
    ["unauthenticated", 401],
    ["already_exists", 409],
    ["unavailable", 503],
  ])("answers %s with HTTP %i", async (code, status) => {
    const a = await call("POST", "/v1/fail", { code, reason: "R", message: "m" });
    expect(a.status).toBe(status);
    expect(a.json.code).toBe(code);
  });

  it("passes request headers and context values to the handler, and trailers back", async () => {
    const a = await call("GET", "/v1/whoami", undefined, {
      authorization: "Bearer abc",
      "x-client": "test-client",
      "connect-timeout-ms": "nonsense",
    });
    expect(a.status).toBe(200);
    expect(a.json).toEqual({
      authorization: "Bearer abc",
      client: "test-client",
      request_method: "POST",
    });
    expect(a.headers.get("x-rpc")).toBe("WhoAmI");
    expect(a.headers.get("x-trailer")).toBe("t");
  });
});

describe("HTTP/2", () => {
  let h2server: http2.Http2Server;
  let client: http2.ClientHttp2Session;

  beforeAll(async () => {
    h2server = http2.createServer(rest);
    await new Promise<void>((resolve) => h2server.listen(0, "127.0.0.1", resolve));
    client = http2.connect(`http://127.0.0.1:${(h2server.address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    client.close();
    await new Promise((resolve) => h2server.close(resolve));
  });

  function h2call(headers: http2.OutgoingHttpHeaders, body?: string) {
    return new Promise<{ status: number; headers: http2.IncomingHttpHeaders; body: string }>(
      (resolve, reject) => {
        const stream = client.request(headers, { endStream: body === undefined });
        let text = "";
        let head: http2.IncomingHttpHeaders = {};
        stream.setEncoding("utf8");
        stream.on("response", (h) => (head = h));
        stream.on("data", (c: string) => (text += c));
        stream.on("end", () =>
          resolve({ status: Number(head[":status"]), headers: head, body: text }),
        );
        stream.on("error", reject);
        if (body !== undefined) stream.end(body);
      },
    );
  }

  it("serves GET with headers and POST with a body over h2c", async () => {
    const who = await h2call({
      ":method": "GET",
      ":path": "/v1/whoami",
      authorization: "Bearer h2",
    });
    expect(who.status).toBe(200);
    expect(JSON.parse(who.body)).toMatchObject({ authorization: "Bearer h2" });
    const created = await h2call(
      { ":method": "POST", ":path": "/v1/shelves/s2/books", "content-type": "application/json" },
      JSON.stringify({ requestId: "h2" }),
    );
    expect(created.status).toBe(200);
    expect(created.headers["x-rpc"]).toBe("CreateBook");
    expect(JSON.parse(created.body).request).toMatchObject({ shelf: "s2", request_id: "h2" });
  });

  it("answers REST errors over h2c", async () => {
    const missing = await h2call({ ":method": "GET", ":path": "/nothing" });
    expect(missing.status).toBe(404);
    expect(missing.headers["content-type"]).toBe("application/json");
    const big = await h2call(
      { ":method": "POST", ":path": "/v1/books", "content-type": "application/json" },
      JSON.stringify({ request_id: "x".repeat(maxBodyBytes) }),
    );
    expect(big.status).toBe(413);
  });
});
