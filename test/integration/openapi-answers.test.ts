import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createValidators,
  openApiProblems,
  type RequestProblems,
  type ResponseProblems,
} from "../support/openapi.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Real answers of a running core, validated against gen/openapi.json with openapi-backend's
 * response validator (on Ajv's JSON Schema 2020-12 dialect, the one OpenAPI 3.1 uses), and
 * the document itself against the OpenAPI 3.1 schema. Issue 16 item 1.
 */

const document = JSON.parse(
  readFileSync(new URL("../../gen/openapi.json", import.meta.url), "utf8"),
) as object;
let validate: ResponseProblems;
let validateRequest: RequestProblems;

const password = "openapi-answers-password";
let server: TestServer;
let token = "";
let settingsKey = "";

beforeAll(async () => {
  ({ response: validate, request: validateRequest } = await createValidators(document));
  server = await startTestServer();
  await server.createUser("oa-admin", password, ["admin"]);
  settingsKey = await server.createApiKey(["settings:read"]);
});

afterAll(async () => {
  await server?.close();
});

interface Answer {
  status: number;
  body: unknown;
}

async function call(
  method: string,
  path: string,
  options: { body?: unknown; token?: string; key?: string; malformed?: boolean } = {},
): Promise<Answer> {
  // What the tests send well-formed the document allows (its request schemas are not too strict).
  if (!options.malformed) {
    expect(validateRequest(method, path, options.body), `${method} ${path}`).toEqual([]);
  }
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      ...(options.body === undefined ? {} : { "content-type": "application/json" }),
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...(options.key ? { "x-api-key": options.key } : {}),
    },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  return { status: res.status, body: await res.json() };
}

/** The validator's complaints about an answer to an operation (empty: it conforms). */
const problems = (operationId: string, answer: Answer) =>
  validate(operationId, answer.status, answer.body);

describe("gen/openapi.json", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    expect(await openApiProblems(document)).toEqual([]);
  });
});

describe("real answers conform to gen/openapi.json", () => {
  it("Login, 200", async () => {
    const answer = await call("POST", "/auth/login", {
      body: { username: "oa-admin", password },
    });
    expect(answer.status).toBe(200);
    expect(problems("IdentityService_Login", answer)).toEqual([]);
    token = (answer.body as { token: string }).token;
    expect(token).not.toBe("");
  });

  it("Validate, 200, of a valid and of a missing token", async () => {
    const valid = await call("GET", "/auth/validate", { token });
    expect(valid.status).toBe(200);
    expect(valid.body).toMatchObject({ valid: true, username: "oa-admin" });
    expect(problems("IdentityService_Validate", valid)).toEqual([]);
    const missing = await call("GET", "/auth/validate");
    expect(missing.body).toMatchObject({ valid: false, reason: "missing" });
    expect(problems("IdentityService_Validate", missing)).toEqual([]);
  });

  it("a policy Evaluate, 200", async () => {
    const answer = await call("POST", "/api/policy/evaluate", {
      token,
      body: { traits: ["role:nurse"], context: "USER_ACTION", classifications: ["internal"] },
    });
    expect(answer.status).toBe(200);
    expect(problems("PolicyService_Evaluate", answer)).toEqual([]);
    // The same operation by its additional binding.
    const legacy = await call("POST", "/policy/evaluate", {
      token,
      body: { traits: ["role:nurse"], context: "USER_ACTION", classifications: ["internal"] },
    });
    expect(problems("PolicyService_Evaluate_2", legacy)).toEqual([]);
  });

  it("a settings read, 200", async () => {
    const answer = await call("GET", "/api/admin/settings", { token, key: settingsKey });
    expect(answer.status).toBe(200);
    expect(problems("SettingsService_GetSettings", answer)).toEqual([]);
  });

  it("errors: 400 with ErrorInfo naming the field, 401, 403", async () => {
    const unknownField = await call("POST", "/auth/login", {
      body: { username: "oa-admin", password, colour: "blue" },
      malformed: true,
    });
    expect(unknownField.status).toBe(400);
    expect(unknownField.body).toMatchObject({
      code: "invalid_argument",
      details: [
        {
          "@type": "type.googleapis.com/google.rpc.ErrorInfo",
          reason: "UNKNOWN_FIELD",
          metadata: { field: "colour" },
        },
      ],
    });
    expect(problems("IdentityService_Login", unknownField)).toEqual([]);
    // A rule of the proto (protovalidate) broken: ErrorInfo first, then the violations.
    const tooLong = await call("POST", "/auth/login", {
      body: { username: "x".repeat(129), password },
      malformed: true,
    });
    // The document says so too: the proto's rule (max_len 128) is in the request schema.
    expect(
      validateRequest("POST", "/auth/login", { username: "x".repeat(129), password }),
    ).not.toEqual([]);
    expect(tooLong.status).toBe(400);
    expect(problems("IdentityService_Login", tooLong)).toEqual([]);
    const wrong = await call("POST", "/auth/login", {
      body: { username: "oa-admin", password: "not-it" },
    });
    expect(wrong.status).toBe(401);
    expect(problems("IdentityService_Login", wrong)).toEqual([]);
    const noKey = await call("GET", "/api/admin/settings", { token });
    expect(noKey.status).toBe(401);
    expect(problems("SettingsService_GetSettings", noKey)).toEqual([]);
  });

  it("and the validator does refuse answers that differ from the document", async () => {
    const login = await call("POST", "/auth/login", { body: { username: "oa-admin", password } });
    const { token: _, ...withoutToken } = login.body as Record<string, unknown>;
    expect(problems("IdentityService_Login", { ...login, body: withoutToken })).not.toEqual([]);
    const camel = { ...withoutToken, token: "t", tokenType: "Bearer" };
    expect(problems("IdentityService_Login", { ...login, body: camel })).not.toEqual([]);
    const noErrorInfo = { code: "invalid_argument", message: "m", details: [] };
    expect(problems("IdentityService_Login", { status: 400, body: noErrorInfo })).not.toEqual([]);
  });
});
