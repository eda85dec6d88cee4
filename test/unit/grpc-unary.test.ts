import {
  type ClientHttp2Session,
  connect,
  constants,
  createServer,
  type Http2Server,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextKey,
  createContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  FailRequestSchema,
  TranscodingTestService,
  WhoAmIResponseSchema,
} from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { silentLogger } from "../../src/log.js";
import { isPlainGrpc, serveGrpcUnary } from "../../src/server/grpc-unary.js";
import { UnaryMethods } from "../../src/server/unary.js";
import { countAbortControllers } from "../support/abort-controllers.js";

const clientKey = createContextKey("", { description: "test client" });
const maxBodyBytes = 64;
const seen: {
  timeoutMs?: number | undefined;
  protocol?: string;
  aborted?: { afterMs: number; reason: unknown };
  signalAborted?: boolean;
} = {};

/** An interceptor: its header must reach the client, as through Connect's handler. */
const tagRpc: Interceptor = (next) => async (req) => {
  const res = await next(req);
  res.header.set("x-rpc", req.method.name);
  return res;
};

const methods = new UnaryMethods([tagRpc]);
methods.recording(createConnectRouter({ interceptors: [tagRpc] })).service(TranscodingTestService, {
  fail(request) {
    throw new ConnectError(request.message, Code.PermissionDenied, { "x-why": "because" });
  },
  async whoAmI(_request, ctx) {
    if (ctx.requestHeader.has("x-wait")) {
      // Waits for the client to go away (at most 5 s), noting when the signal said so.
      const started = performance.now();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 5000);
        ctx.signal.addEventListener("abort", () => {
          clearTimeout(timer);
          seen.aborted = { afterMs: performance.now() - started, reason: ctx.signal.reason };
          resolve();
        });
      });
    }
    // Asked for, the signal is made with the deadline's timer.
    if (ctx.requestHeader.has("x-signal")) seen.signalAborted = ctx.signal.aborted;
    seen.timeoutMs = ctx.timeoutMs();
    seen.protocol = ctx.protocolName;
    ctx.responseTrailer.set("x-trailer", "t");
    return {
      authorization: ctx.requestHeader.get("authorization") ?? "",
      client: ctx.values.get(clientKey),
      requestMethod: ctx.requestMethod,
    };
  },
});

let server: Http2Server;
let session: ClientHttp2Session;

beforeAll(async () => {
  server = createServer((req, res) => {
    const spec = isPlainGrpc(req) ? methods.get(req.url) : undefined;
    if (spec === undefined) {
      res.writeHead(404).end();
      return;
    }
    void serveGrpcUnary(spec, req, res, {
      methods,
      maxBodyBytes,
      contextValues: createContextValues().set(clientKey, "c1"),
      log: silentLogger,
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  session = connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});
afterAll(async () => {
  session.close();
  await new Promise((resolve) => server.close(resolve));
});

function envelope(message: Uint8Array, flags = 0): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame[0] = flags;
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

interface Answer {
  headers: Record<string, unknown>;
  trailers: Record<string, unknown>;
  body: Buffer;
}

function call(method: string, body: Buffer, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": `/traitgate.testing.v1.TranscodingTestService/${method}`,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    const answer: Answer = { headers: {}, trailers: {}, body: Buffer.alloc(0) };
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      answer.headers = h;
    });
    stream.on("trailers", (t) => {
      answer.trailers = t;
    });
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => resolve({ ...answer, body: Buffer.concat(chunks) }));
    stream.on("error", reject);
    stream.end(body);
  });
}

describe("gRPC unary calls in process (src/server/grpc-unary.ts)", () => {
  it("runs the interceptors and the implementation; headers, trailers and message come back", async () => {
    const answer = await call("WhoAmI", envelope(new Uint8Array()), {
      authorization: "Bearer abc",
      "grpc-timeout": "5S",
    });
    expect(answer.headers["content-type"]).toBe("application/grpc+proto");
    expect(answer.headers["x-rpc"]).toBe("WhoAmI");
    expect(answer.trailers).toMatchObject({ "grpc-status": "0", "x-trailer": "t" });
    expect(answer.body.readUInt32BE(1)).toBe(answer.body.length - 5);
    const message = fromBinary(WhoAmIResponseSchema, answer.body.subarray(5));
    expect(message).toMatchObject({
      authorization: "Bearer abc",
      client: "c1",
      requestMethod: "POST",
    });
    expect(seen.protocol).toBe("grpc");
    expect(seen.timeoutMs).toBeGreaterThan(4000);
    expect(seen.timeoutMs).toBeLessThanOrEqual(5000);
  });

  it("makes no abort signal for a call whose handler does not ask for one", async () => {
    await call("WhoAmI", envelope(new Uint8Array())); // the session is up
    const counted = countAbortControllers();
    try {
      const answer = await call("WhoAmI", envelope(new Uint8Array()), { "grpc-timeout": "5S" });
      expect(answer.trailers["grpc-status"]).toBe("0");
      expect(counted.made).toBe(0);
    } finally {
      counted.restore();
    }
  });

  it("tells the handler at once when the client cancels the call", async () => {
    delete seen.aborted;
    const stream = session.request({
      ":method": "POST",
      ":path": "/traitgate.testing.v1.TranscodingTestService/WhoAmI",
      "content-type": "application/grpc",
      te: "trailers",
      "x-wait": "1",
    });
    stream.on("error", () => {});
    stream.end(envelope(new Uint8Array()));
    await new Promise((r) => setTimeout(r, 50));
    stream.close(constants.NGHTTP2_CANCEL);
    const aborted = () => seen.aborted;
    for (let i = 0; i < 100 && aborted() === undefined; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    // Well before the handler's own 5 s: the signal came from the cancel, not the call's end.
    expect(aborted()?.afterMs).toBeLessThan(4000);
    expect(ConnectError.from(aborted()?.reason).code).toBe(Code.Canceled);
  });

  it("answers an error with its status, message and metadata in the trailers", async () => {
    const request = toBinary(FailRequestSchema, create(FailRequestSchema, { message: "no way" }));
    const answer = await call("Fail", envelope(request));
    expect(answer.body.length).toBe(0);
    expect(answer.trailers).toMatchObject({
      "grpc-status": String(Code.PermissionDenied),
      "grpc-message": "no%20way",
      "x-why": "because",
    });
  });

  it.each([
    ["an empty body", Buffer.alloc(0), Code.Unimplemented],
    ["a cut envelope", Buffer.from([0, 0, 0]), Code.InvalidArgument],
    [
      "a message shorter than its prefix says",
      Buffer.from([0, 0, 0, 0, 9, 1]),
      Code.InvalidArgument,
    ],
    [
      "two messages",
      Buffer.concat([envelope(new Uint8Array()), envelope(new Uint8Array())]),
      Code.Unimplemented,
    ],
    ["a compressed message without grpc-encoding", envelope(new Uint8Array([1]), 1), Code.Internal],
    ["a message that does not parse", envelope(new Uint8Array([0xff, 0xff])), Code.Internal],
    [
      "a message over the size limit",
      envelope(new Uint8Array(maxBodyBytes + 1)),
      Code.ResourceExhausted,
    ],
  ])("refuses %s", async (_what, body, code) => {
    const answer = await call("WhoAmI", body);
    expect(answer.trailers["grpc-status"]).toBe(String(code));
  });

  it("refuses a malformed grpc-timeout with INVALID_ARGUMENT", async () => {
    const answer = await call("WhoAmI", envelope(new Uint8Array()), { "grpc-timeout": "soon" });
    expect(answer.trailers["grpc-status"]).toBe(String(Code.InvalidArgument));
  });

  it("holds a deadline longer than a timer can as the longest a timer can (no warning, no abort)", async () => {
    // Node fires a timer of 2^31 ms or more after 1 ms, with a TimeoutOverflowWarning: any
    // caller could otherwise turn a long deadline into an immediate one and fill stderr.
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    try {
      const answer = await call("WhoAmI", envelope(new Uint8Array()), {
        "grpc-timeout": "99999999H",
        "x-signal": "1",
      });
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(answer.trailers["grpc-status"]).toBe("0");
      expect(seen.timeoutMs).toBeGreaterThan(2 ** 31);
      expect(seen.signalAborted).toBe(false);
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings).not.toContain("TimeoutOverflowWarning");
  });

  it("leaves compressed, JSON and HTTP/1.1 gRPC to Connect's handler", () => {
    const base = { httpVersionMajor: 2, method: "POST" };
    expect(isPlainGrpc({ ...base, headers: { "content-type": "application/grpc" } })).toBe(true);
    expect(isPlainGrpc({ ...base, headers: { "content-type": "application/grpc+proto" } })).toBe(
      true,
    );
    expect(
      isPlainGrpc({
        ...base,
        headers: { "content-type": "application/grpc", "grpc-encoding": "gzip" },
      }),
    ).toBe(false);
    expect(isPlainGrpc({ ...base, headers: { "content-type": "application/grpc+json" } })).toBe(
      false,
    );
    expect(isPlainGrpc({ ...base, headers: { "content-type": "application/grpc-web" } })).toBe(
      false,
    );
    expect(
      isPlainGrpc({
        ...base,
        httpVersionMajor: 1,
        headers: { "content-type": "application/grpc" },
      }),
    ).toBe(false);
  });
});
