import { request as httpRequest } from "node:http";
import { type ClientHttp2Session, connect as h2connect } from "node:http2";
import { connect as tcpConnect } from "node:net";
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
 * the server), names matched whatever their case. A repeated Authorization is refused on
 * every protocol (Node keeps only the first in `req.headers`; Node's HTTP/2 client cannot send
 * one, so those calls are written as raw HTTP/2 frames).
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

/** GET /auth/validate over HTTP/1.1 with raw header lines (or POST `path` with `body`). */
function restValidate(
  headers: [string, string][],
  post?: { path: string; body: string },
): Promise<{ valid?: boolean; reason?: string }> {
  return new Promise((resolve, reject) => {
    const { host } = new URL(server.url);
    const req = httpRequest(`${server.url}${post?.path ?? "/auth/validate"}`, {
      method: post === undefined ? "GET" : "POST",
      // Raw name, value pairs: the names go out spelled as given.
      headers: [
        "Host",
        host,
        ...(post === undefined ? [] : ["Content-Type", "application/json"]),
        ...headers.flat(),
      ],
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
    req.end(post?.body);
  });
}

/** An HPACK integer with a 7-bit prefix (RFC 7541, 5.1). */
function hpackInt(n: number): number[] {
  if (n < 127) return [n];
  const out = [127];
  let rest = n - 127;
  while (rest >= 128) {
    out.push((rest & 127) | 128);
    rest >>= 7;
  }
  out.push(rest);
  return out;
}

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/**
 * One request on a new HTTP/2 connection, written frame by frame (every field a literal
 * without indexing, so a name may repeat); resolves with the response body. Node's HTTP/2
 * client refuses to send a repeated Authorization; an attacker's client need not.
 */
function rawH2(fields: [string, string][], body?: string): Promise<string> {
  const { port } = new URL(server.url);
  return new Promise((resolve, reject) => {
    const block = Buffer.from(
      fields.flatMap(([name, value]) => [
        0,
        ...hpackInt(Buffer.byteLength(name)),
        ...Buffer.from(name),
        ...hpackInt(Buffer.byteLength(value)),
        ...Buffer.from(value),
      ]),
    );
    const socket = tcpConnect(Number(port), "127.0.0.1", () => {
      socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
      socket.write(frame(4, 0, 0, Buffer.alloc(0)));
      // HEADERS: END_HEADERS, and END_STREAM when there is no body.
      socket.write(frame(1, body === undefined ? 5 : 4, 1, block));
      if (body !== undefined) socket.write(frame(0, 1, 1, Buffer.from(body)));
    });
    let input = Buffer.alloc(0);
    const data: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => {
      input = Buffer.concat([input, chunk]);
      while (input.length >= 9) {
        const length = input.readUIntBE(0, 3);
        if (input.length < 9 + length) break;
        const [type, flags] = [input[3] as number, input[4] as number];
        const stream = input.readUInt32BE(5) & 0x7fffffff;
        const payload = input.subarray(9, 9 + length);
        input = input.subarray(9 + length);
        if (type === 4 && (flags & 1) === 0) socket.write(frame(4, 1, 0, Buffer.alloc(0)));
        if (type === 3 || type === 7) {
          socket.destroy();
          return reject(new Error(`stream reset or connection closed (frame type ${type})`));
        }
        if (stream !== 1) continue;
        if (type === 0) data.push(payload);
        if ((type === 0 || type === 1) && (flags & 1) === 1) {
          socket.destroy();
          return resolve(Buffer.concat(data).toString("utf8"));
        }
      }
    });
    socket.on("error", reject);
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

  it("refuses a repeated Authorization on every protocol, whichever token comes first", async () => {
    const pairs: [string, string][][] = [
      [
        ["Authorization", `Bearer ${token}`],
        ["Authorization", "Bearer not-a-token"],
      ],
      [
        ["authorization", "Bearer not-a-token"],
        ["AUTHORIZATION", `Bearer ${token}`],
      ],
      [
        ["Authorization", `Bearer ${token}`],
        ["Authorization", `Bearer ${token}`],
      ],
    ];
    const { host } = new URL(server.url);
    const validate = "/traitgate.identity.v1.IdentityService/Validate";
    for (const headers of pairs) {
      // REST and Connect over HTTP/1.1.
      expect(await restValidate(headers)).toMatchObject({ valid: false, reason: "malformed" });
      expect(await restValidate(headers, { path: validate, body: "{}" })).toEqual({
        reason: "malformed",
      });
      const lower = headers.map(([n, v]): [string, string] => [n.toLowerCase(), v]);
      // REST and Connect over HTTP/2.
      const rest = await rawH2([
        [":method", "GET"],
        [":scheme", "http"],
        [":authority", host],
        [":path", "/auth/validate"],
        ...lower,
      ]);
      expect(JSON.parse(rest)).toMatchObject({ valid: false, reason: "malformed" });
      const connect = await rawH2(
        [
          [":method", "POST"],
          [":scheme", "http"],
          [":authority", host],
          [":path", validate],
          ["content-type", "application/json"],
          ...lower,
        ],
        "{}",
      );
      expect(JSON.parse(connect)).toEqual({ reason: "malformed" });
    }
    // One Authorization still passes on each.
    expect((await restValidate([["Authorization", `Bearer ${token}`]])).valid).toBe(true);
    const one = await rawH2([
      [":method", "GET"],
      [":scheme", "http"],
      [":authority", host],
      [":path", "/auth/validate"],
      ["authorization", `Bearer ${token}`],
    ]);
    expect(JSON.parse(one)).toMatchObject({ valid: true });
  });
});
