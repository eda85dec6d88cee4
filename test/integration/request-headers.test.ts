import { request as httpRequest } from "node:http";
import { type ClientHttp2Session, connect as h2connect } from "node:http2";
import { fromBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ValidateResponseSchema } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The handlers' request headers are read from the request's header list only as far as they
 * are asked for (src/server/request-headers.ts). Tried as a client that spells the same
 * header oddly would: repeated, padded, capitalised, with a long run of spaces inside, many
 * calls at once, over gRPC (HTTP/2) and REST (HTTP/1.1). The answers must be those a fetch
 * `Headers` gives: padding trimmed (HTTP/1.1; HTTP/2 drops a padded field before it reaches
 * the server), names matched whatever their case. (A repeated
 * Authorization is joined and refused on this path: test/unit/request-headers.test.ts; Node's
 * HTTP/2 client cannot send one.)
 */

let server: TestServer;
let token = "";
let session: ClientHttp2Session;

beforeAll(async () => {
  server = await startTestServer();
  await server.createUser("hedda", "hedda-password-123", ["viewer"]);
  const res = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username: "hedda", password: "hedda-password-123" }),
  });
  token = ((await res.json()) as { token: string }).token;
  session = h2connect(server.url);
});

afterAll(async () => {
  session?.close();
  await server?.close();
});

/** IdentityService.Validate over gRPC with these headers. */
function grpcValidate(
  headers: Record<string, string>,
): Promise<{ valid: boolean; reason: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": "/traitgate.identity.v1.IdentityService/Validate",
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    const chunks: Buffer[] = [];
    let status = "";
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("trailers", (t) => {
      status = String(t["grpc-status"]);
    });
    stream.on("error", reject);
    stream.on("end", () => {
      const body = Buffer.concat(chunks);
      if (status !== "0" || body.length < 5) return reject(new Error(`grpc-status ${status}`));
      const message = fromBinary(ValidateResponseSchema, body.subarray(5));
      resolve({ valid: message.valid, reason: message.reason });
    });
    stream.end(Buffer.alloc(5));
  });
}

/** GET /auth/validate over HTTP/1.1 with raw header lines. */
function restValidate(headers: [string, string][]): Promise<{ valid: boolean; reason?: string }> {
  return new Promise((resolve, reject) => {
    const { host } = new URL(server.url);
    const req = httpRequest(`${server.url}/auth/validate`, {
      method: "GET",
      // Raw name, value pairs: the names go out spelled as given.
      headers: ["Host", host, ...headers.flat()],
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        try {
          resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")));
        } catch (err) {
          reject(err);
        }
      });
    });
    req.on("error", reject);
    req.end();
  });
}

describe("request headers spelled oddly", () => {
  it("takes spaces and tabs after Bearer, and drops a padded value (HTTP/2), 40 calls at once", async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        grpcValidate({
          authorization:
            i % 2 === 0
              ? `Bearer${" \t".repeat(1 + (i % 3))}${token}`
              : // HTTP/2 refuses a field value with whitespace at its ends: nghttp2 drops the
                // field, and the call has no credentials (fail closed).
                ` Bearer ${token}\t`,
        }),
      ),
    );
    answers.forEach((a, i) => {
      expect(a, `call ${i}`).toEqual(
        i % 2 === 0 ? { valid: true, reason: "" } : { valid: false, reason: "missing" },
      );
    });
  });

  it("answers a long run of spaces inside a header, as invalid", async () => {
    // Within Node's HTTP/2 header list limit (a larger block is refused before any handler).
    const answer = await grpcValidate({
      authorization: `Bearer${" ".repeat(20_000)}x${" ".repeat(10_000)}y`,
      "x-request-id": `id${" ".repeat(20_000)}x`,
    });
    expect(answer.valid).toBe(false);
    // The server still answers others.
    expect((await grpcValidate({ authorization: `Bearer ${token}` })).valid).toBe(true);
  });

  it("takes a capitalised name over HTTP/1.1, and the same token through REST", async () => {
    expect((await restValidate([["AUTHORIZATION", `Bearer ${token}`]])).valid).toBe(true);
    expect((await restValidate([["Authorization", `  Bearer ${token}  `]])).valid).toBe(true);
    const missing = await restValidate([["X-Authorization", `Bearer ${token}`]]);
    expect(missing.valid).toBe(false);
  });
});
