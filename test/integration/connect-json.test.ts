import { connect as h2connect } from "node:http2";
import { connect } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Connect's unary JSON calls with a body that is not the request message answer as the REST
 * paths do: a 400 whose ErrorInfo names the field (src/server/connect-json.ts). Before, the
 * answer was protobuf-es's decode message ("cannot decode message
 * traitgate.policy.v1.EvaluateRequest from JSON: ...") with no reason to branch on.
 */

let server: TestServer;
let token = "";
const password = "connect-json-password-1";

beforeAll(async () => {
  server = await startTestServer({ env: { MAX_BODY_BYTES: "4096" } });
  await server.createUser("cora", password, ["viewer"]);
  const res = await fetch(`${server.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username: "cora", password }),
  });
  token = ((await res.json()) as { token: string }).token;
});

afterAll(async () => {
  await server?.close();
});

const evaluatePath = "/traitgate.policy.v1.PolicyService/Evaluate";

async function connectJson(body: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}${evaluatePath}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "connect-protocol-version": "1",
      authorization: `Bearer ${token}`,
      ...headers,
    },
    body,
  });
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { res, bytes };
}

/** The error a Connect client sees, with its ErrorInfo. */
async function refusal(body: string) {
  const { res, bytes } = await connectJson(body);
  const error = errorFromJsonBytes(
    bytes,
    undefined,
    new ConnectError("not a Connect error", Code.Unknown),
  );
  const info = error.findDetails(ErrorInfoSchema)[0];
  return { status: res.status, requestId: res.headers.get("x-request-id"), error, info };
}

describe("Connect JSON bodies of the wrong shape", () => {
  it("names the field whose value has the wrong shape", async () => {
    const got = await refusal(JSON.stringify({ context: "SEARCH", traits: "role:viewer" }));
    expect(got.status).toBe(400);
    expect(got.error.code).toBe(Code.InvalidArgument);
    expect(got.info?.reason).toBe("INVALID_FIELD");
    expect(got.info?.metadata).toEqual({ field: "traits" });
    expect(got.error.rawMessage).toBe("traits: expected an array of strings, got a string");
    expect(got.requestId).toMatch(/\S/);
  });

  it("names a nested path, an unknown key, and says when the body is not JSON", async () => {
    const nested = await refusal(
      JSON.stringify({ context: "SEARCH", traits: ["role:viewer", { a: 1 }] }),
    );
    expect(nested.info).toMatchObject({
      reason: "INVALID_FIELD",
      metadata: { field: "traits[1]" },
    });
    const unknown = await refusal(JSON.stringify({ context: "SEARCH", trait: ["x"] }));
    expect(unknown.info).toMatchObject({ reason: "UNKNOWN_FIELD", metadata: { field: "trait" } });
    const malformed = await refusal('{"context": "SEARCH",');
    expect(malformed.status).toBe(400);
    expect(malformed.info?.reason).toBe("MALFORMED_JSON");
  });

  it("refuses a body over the limit, and answers the next call on the server", async () => {
    const big = await refusal(JSON.stringify({ context: "SEARCH", traits: ["x".repeat(5000)] }));
    expect(big.status).toBe(429);
    expect(big.error.code).toBe(Code.ResourceExhausted);
    expect(big.info?.reason).toBe("BODY_TOO_LARGE");
    // Over HTTP/2, without a declared length: answered, then the stream is reset (NO_ERROR) so
    // that the client stops sending what is left.
    const session = h2connect(server.url);
    try {
      const answer = await new Promise<{ status: number; reset?: number }>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": evaluatePath,
          "content-type": "application/json",
          authorization: `Bearer ${token}`,
        });
        let status = 0;
        stream.on("response", (h) => {
          status = Number(h[":status"]);
        });
        stream.on("error", reject);
        // The server's RST_STREAM: the client's side is told its upload was cut off.
        stream.on("aborted", () => {
          resolve({ status, reset: stream.rstCode });
          stream.destroy();
        });
        stream.resume();
        // Far more than the limit, in pieces, never ended by the client.
        const piece = Buffer.alloc(1024, 0x20);
        for (let k = 0; k < 64; k++) stream.write(piece);
      });
      expect(answer).toEqual({ status: 429, reset: 0 });
    } finally {
      session.close();
    }
    const { res, bytes } = await connectJson(
      JSON.stringify({ context: "SEARCH", traits: ["role:viewer"] }),
    );
    expect(res.status).toBe(200);
    expect(JSON.parse(new TextDecoder().decode(bytes))).toHaveProperty("decisionId");
  });

  it("takes a body with a byte order mark, and leaves other content types to Connect", async () => {
    const bom = await connectJson(`\ufeff${JSON.stringify({ context: "SEARCH", traits: [] })}`);
    expect(bom.res.status).toBe(200);
    const charset = await connectJson(JSON.stringify({ context: "SEARCH", traits: [] }), {
      "content-type": "application/json; charset=utf-8",
    });
    expect(charset.res.status).toBe(200);
    // Not a content type Connect takes for unary JSON: its own 415, as before.
    const other = await connectJson(JSON.stringify({ traits: "x" }), {
      "content-type": "application/json; foo=bar",
    });
    expect(other.res.status).toBe(415);
  });

  it("leaves a valid body to Connect as before: validated, authenticated", async () => {
    const ok = await connectJson(JSON.stringify({ context: "SEARCH", traits: ["role:viewer"] }));
    expect(ok.res.status).toBe(200);
    // Still validated after decoding: a valid shape with a bad value is protovalidate's 400.
    const bad = await refusal(JSON.stringify({ context: "lower", traits: ["role:viewer"] }));
    expect(bad.status).toBe(400);
    expect(bad.info).toMatchObject({ reason: "INVALID_FIELD", metadata: { field: "context" } });
    // Unauthenticated is still unauthenticated, whatever the body.
    const res = await fetch(`${server.url}${evaluatePath}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ context: "SEARCH" }),
    });
    expect(res.status).toBe(401);
  });

  it("answers 40 bad bodies at once, and survives a client that leaves mid-body", async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        refusal(JSON.stringify({ context: "SEARCH", traits: i % 2 ? "x" : [i] })),
      ),
    );
    for (const [i, a] of answers.entries()) {
      expect(a.info, `call ${i}`).toMatchObject({
        reason: "INVALID_FIELD",
        metadata: { field: i % 2 ? "traits" : "traits[0]" },
      });
    }
    const { port } = new URL(server.url);
    await new Promise<void>((resolve, reject) => {
      const socket = connect(Number(port), "127.0.0.1", () => {
        socket.write(
          `POST ${evaluatePath} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n` +
            `authorization: Bearer ${token}\r\ncontent-length: 1000\r\n\r\n{"context":`,
        );
        setTimeout(() => {
          socket.destroy();
          resolve();
        }, 50);
      });
      socket.on("error", reject);
    });
    const after = await connectJson(JSON.stringify({ context: "SEARCH", traits: ["role:viewer"] }));
    expect(after.res.status).toBe(200);
  });
});
