import { createConnectRouter } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { TranscodingTestService } from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { listRestRoutes } from "../../src/server/transcoder/index.js";
import { parsePathTemplate, variableValue } from "../../src/server/transcoder/path-template.js";
import { RouteTrie } from "../../src/server/transcoder/route-trie.js";
import { UnaryMethods } from "../../src/server/unary.js";

describe("parsePathTemplate", () => {
  it("parses literals, wildcards, variables with patterns and a verb", () => {
    const t = parsePathTemplate("/v1/{book.name=shelves/*/books/*}:archive");
    expect(t.segments).toEqual([
      { kind: "literal", value: "v1" },
      { kind: "literal", value: "shelves" },
      { kind: "wildcard" },
      { kind: "literal", value: "books" },
      { kind: "wildcard" },
    ]);
    expect(t.variables).toEqual([
      { fieldPath: ["book", "name"], start: 1, end: 5, deep: false, multiSegment: true },
    ]);
    expect(t.verb).toBe("archive");
  });

  it("parses {var} as one segment and {var=**} as the rest", () => {
    expect(parsePathTemplate("/v1/shelves/{shelf}").variables).toEqual([
      { fieldPath: ["shelf"], start: 2, end: 3, deep: false, multiSegment: false },
    ]);
    const deep = parsePathTemplate("/files/{path=**}");
    expect(deep.segments.at(-1)).toEqual({ kind: "deep" });
    expect(deep.variables[0]).toMatchObject({ deep: true, multiSegment: true });
    expect(parsePathTemplate("/v1/*/x/**").segments.map((s) => s.kind)).toEqual([
      "literal",
      "wildcard",
      "literal",
      "deep",
    ]);
  });

  it.each([
    "v1/books",
    "/v1/{name",
    "/v1/{na-me}",
    "/v1/**/books",
    "/v1/{a={b}}",
    "/v1/{a}/{a}",
    "/v1/books:",
    "/v1/bo{ok",
  ])("refuses %s", (template) => {
    expect(() => parsePathTemplate(template)).toThrow(/invalid path template/);
  });

  it("decodes one-segment values fully and keeps %2F in multi-segment values", () => {
    const one = parsePathTemplate("/v1/{shelf}").variables[0]!;
    expect(variableValue(one, ["v1", "a%2Fb%20c"])).toBe("a/b c");
    const deep = parsePathTemplate("/v1/{path=**}").variables[0]!;
    expect(variableValue(deep, ["v1", "a", "b%2fc%20d", "e"])).toBe("a/b%2fc d/e");
    expect(variableValue(one, ["v1", "%E0%A4%A"])).toBeUndefined();
  });
});

describe("RouteTrie", () => {
  const trie = new RouteTrie<{ id: string }>();
  const add = (method: string, template: string, id: string) =>
    trie.add(parsePathTemplate(template), method, { id });
  add("GET", "/v1/shelves/default", "literal");
  add("GET", "/v1/shelves/{shelf}", "wildcard");
  add("GET", "/v1/shelves/{path=**}", "deep");
  add("GET", "/v1/{name=shelves/*/books/*}", "book");
  add("PATCH", "/v1/{name=shelves/*/books/*}", "patch");
  add("POST", "/v1/{name=shelves/*/books/*}:archive", "archive");
  const found = (method: string, path: string) => {
    const m = trie.match(path, method);
    return m.kind === "found" ? m.route.id : m.kind;
  };

  it("prefers a literal to *, and * to **", () => {
    expect(found("GET", "/v1/shelves/default")).toBe("literal");
    expect(found("GET", "/v1/shelves/other")).toBe("wildcard");
    expect(found("GET", "/v1/shelves/a/b/c")).toBe("deep");
    expect(found("GET", "/v1/shelves/s/books/b")).toBe("book");
  });

  it("matches custom verbs, and falls back to the colon being part of the segment", () => {
    expect(found("POST", "/v1/shelves/s/books/b:archive")).toBe("archive");
    const m = trie.match("/v1/shelves/s/books/b:archive", "GET");
    expect(m.kind === "found" && m.route.id).toBe("book");
    expect(m.kind === "found" && m.segments.at(-1)).toBe("b:archive");
  });

  it("reports the methods of every matching template, or no match", () => {
    expect(trie.match("/v1/shelves/s/books/b", "PUT")).toEqual({
      kind: "method_not_allowed",
      allowed: ["GET", "PATCH"],
    });
    expect(trie.match("/v2/shelves", "GET")).toEqual({ kind: "not_found" });
    expect(trie.match("/v1/shelf/s/books/b", "PATCH")).toEqual({ kind: "not_found" });
  });

  it("refuses a route bound twice", () => {
    expect(() => add("GET", "/v1/shelves/{other}", "again")).toThrow(/bound twice/);
  });
});

describe("listRestRoutes", () => {
  it("lists the bindings of the identity service", () => {
    const methods = new UnaryMethods([]);
    methods.recording(createConnectRouter()).service(IdentityService, {});
    expect(listRestRoutes(methods)).toEqual([
      {
        method: "POST",
        template: "/auth/login",
        rpc: "traitgate.identity.v1.IdentityService.Login",
      },
      {
        method: "POST",
        template: "/auth/refresh",
        rpc: "traitgate.identity.v1.IdentityService.Refresh",
      },
      {
        method: "POST",
        template: "/auth/logout",
        rpc: "traitgate.identity.v1.IdentityService.Logout",
      },
      {
        method: "POST",
        template: "/auth/logout-all",
        rpc: "traitgate.identity.v1.IdentityService.LogoutAll",
      },
      {
        method: "POST",
        template: "/auth/mfa/enroll",
        rpc: "traitgate.identity.v1.IdentityService.EnrollMfa",
      },
      {
        method: "POST",
        template: "/auth/mfa/activate",
        rpc: "traitgate.identity.v1.IdentityService.ActivateMfa",
      },
      {
        method: "POST",
        template: "/auth/mfa/disable",
        rpc: "traitgate.identity.v1.IdentityService.DisableMfa",
      },
      {
        method: "POST",
        template: "/auth/token",
        rpc: "traitgate.identity.v1.IdentityService.Token",
      },
      {
        method: "POST",
        template: "/auth/password",
        rpc: "traitgate.identity.v1.IdentityService.ChangePassword",
      },
      {
        method: "GET",
        template: "/auth/validate",
        rpc: "traitgate.identity.v1.IdentityService.Validate",
      },
      {
        method: "GET",
        template: "/.well-known/jwks.json",
        rpc: "traitgate.identity.v1.IdentityService.GetJwks",
      },
      {
        method: "GET",
        template: "/.well-known/openid-configuration",
        rpc: "traitgate.identity.v1.IdentityService.GetOpenIdConfiguration",
      },
    ]);
  });

  it("includes additional bindings", () => {
    const methods = new UnaryMethods([]);
    methods.recording(createConnectRouter()).service(TranscodingTestService, {});
    const routes = listRestRoutes(methods);
    const rpc = "traitgate.testing.v1.TranscodingTestService.CreateBook";
    expect(routes.filter((r) => r.rpc === rpc)).toEqual([
      { method: "POST", template: "/v1/shelves/{shelf}/books", rpc },
      { method: "POST", template: "/v1/books", rpc },
    ]);
  });
});
