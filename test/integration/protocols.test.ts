import { execFile } from "node:child_process";
import * as http2 from "node:http2";
import { promisify } from "node:util";
import { fromBinary } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  Code,
  type Client as ConnectClient,
  ConnectError,
  createClient,
  type Transport,
} from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import {
  IdentityService,
  ValidateResponseSchema,
} from "../../gen/traitgate/identity/v1/identity_pb.js";
import { toolPath } from "../../scripts/tools.mjs";
import { defaultThrottlePolicy, type ThrottlePolicy } from "../../src/identity/throttle.js";
import { createIdentityGrpcJsClient, statusDetails } from "../support/grpc-js.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Login and Validate against a real core on port 0, driven by every kind of
 * client a caller may use: grpc-js from the .proto sources, connect-node over
 * gRPC, Connect (JSON and binary, HTTP/1.1 and HTTP/2) and gRPC-Web, REST over
 * HTTP/1.1 and h2c, and `buf curl` with and without server reflection. Each
 * client runs the same cases; results are normalised to one shape first.
 */

const password = "quiet harbour lantern 4721";
const roles = ["clinician", "auditor"];
const ttlSeconds = 900;
const identity = IdentityService.typeName;

interface Login {
  token: string;
  tokenType: string;
  expiresIn: number;
}
interface Validation {
  valid: boolean;
  reason: string;
  userId: string;
  username: string;
  roles: string[];
  expiresAt: Date | undefined;
}
interface Failure {
  code: Code;
  reason: string | undefined;
  domain: string | undefined;
  field: string | undefined;
}
interface Client {
  login(username: string, password: string): Promise<Login>;
  validate(authorization?: string): Promise<Validation>;
  /** Logs in expecting an error; fails the test if the login succeeds. */
  loginFailure(username: string, password: string): Promise<Failure>;
}

/**
 * Every client makes a wrong-password login for the same account from 127.0.0.1, which the
 * login throttle would slow down exponentially and then refuse; throttling has its own suite
 * (test/integration/throttle.test.ts), so here it is out of reach.
 */
const unthrottled: ThrottlePolicy = {
  ...defaultThrottlePolicy,
  address: { ...defaultThrottlePolicy.address, free: 1_000, block: 10_000 },
  pair: { ...defaultThrottlePolicy.pair, free: 1_000 },
  account: { ...defaultThrottlePolicy.account, free: 1_000 },
};

let server: TestServer;
let userId: string;
const cleanups: (() => void | Promise<void>)[] = [];

beforeAll(async () => {
  server = await startTestServer({ throttlePolicy: unthrottled });
  userId = await server.createUser("alice", password, roles);
});
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  await server?.close();
});

const bearer = (token: string) => `Bearer ${token}`;

// ---------- Connect-ES clients (gRPC, Connect, gRPC-Web) ----------

/** An HTTP/2 session manager closed in afterAll, so no session outlives the server. */
function h2Sessions(): Http2SessionManager {
  const manager = new Http2SessionManager(server.url);
  cleanups.push(() => manager.abort());
  return manager;
}

function connectClient(transport: Transport): Client {
  const client = createClient(IdentityService, transport);
  return {
    async login(username, pw) {
      const res = await client.login({ username, password: pw });
      return { token: res.token, tokenType: res.tokenType, expiresIn: res.expiresIn };
    },
    async validate(authorization) {
      const res = await client.validate({}, { headers: authorization ? { authorization } : {} });
      return {
        valid: res.valid,
        reason: res.reason,
        userId: res.userId,
        username: res.username,
        roles: res.roles,
        expiresAt: res.expiresAt ? timestampDate(res.expiresAt) : undefined,
      };
    },
    async loginFailure(username, pw) {
      const err = await client.login({ username, password: pw }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      if (!err) throw new Error("login succeeded");
      const info = err.findDetails(ErrorInfoSchema)[0];
      return {
        code: err.code,
        reason: info?.reason,
        domain: info?.domain,
        field: info?.metadata.field,
      };
    },
  };
}

// ---------- grpc-js from the .proto sources ----------

function grpcJsClient(): Client {
  const c = createIdentityGrpcJsClient(
    `127.0.0.1:${server.port}`,
    grpc.credentials.createInsecure(),
  );
  cleanups.push(() => c.close());
  return {
    async login(username, pw) {
      const { message } = await c.login({ username, password: pw });
      return { token: message.token, tokenType: message.token_type, expiresIn: message.expires_in };
    },
    async validate(authorization) {
      const { message: m } = await c.validate(authorization ? { authorization } : {});
      return {
        valid: m.valid,
        reason: m.reason,
        userId: m.user_id,
        username: m.username,
        roles: m.roles,
        expiresAt: m.expires_at ? new Date(Number(m.expires_at.seconds) * 1000) : undefined,
      };
    },
    async loginFailure(username, pw) {
      const err = await c.login({ username, password: pw }).then(
        () => undefined,
        (e: unknown) => e as grpc.ServiceError,
      );
      if (!err) throw new Error("login succeeded");
      const status = statusDetails(err);
      expect(status.code).toBe(err.code);
      // grpc-js reads grpc-message with decodeURI, which leaves the "%3A" that connect-es's
      // encodeURIComponent wrote for ":"; the Status detail carries the message unescaped.
      expect(status.message).toBe(decodeURIComponent(err.details));
      const info = status.errorInfo[0];
      return {
        code: err.code as number as Code,
        reason: info?.reason,
        domain: info?.domain,
        field: info?.metadata.field,
      };
    },
  };
}

// ---------- REST (google.api.http transcoding) ----------

interface RestReply {
  status: number;
  header(name: string): string | undefined;
  json: Record<string, unknown>;
}
type RestSend = (
  method: "GET" | "POST",
  path: string,
  headers: Record<string, string>,
  body?: string,
) => Promise<RestReply>;

const sendHttp1: RestSend = async (method, path, headers, body) => {
  const res = await fetch(`${server.url}${path}`, { method, headers, body });
  return {
    status: res.status,
    header: (name) => res.headers.get(name) ?? undefined,
    json: (await res.json()) as Record<string, unknown>,
  };
};

/** REST over one h2c session (HTTP/2 with prior knowledge), opened lazily. */
function h2cSender(): RestSend {
  let session: http2.ClientHttp2Session | undefined;
  cleanups.push(() => session?.close());
  return (method, path, headers, body) =>
    new Promise((resolve, reject) => {
      session ??= http2.connect(server.url);
      const stream = session.request({ ":method": method, ":path": path, ...headers });
      let responseHeaders: http2.IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      stream.on("response", (h) => {
        responseHeaders = h;
      });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("error", reject);
      stream.on("end", () => {
        const value = (name: string) => {
          const v = responseHeaders[name];
          return Array.isArray(v) ? v.join(", ") : v?.toString();
        };
        resolve({
          status: Number(responseHeaders[":status"]),
          header: value,
          json: JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>,
        });
      });
      stream.end(body);
    });
}

/** The REST error body's code (snake_case gRPC code name) and its HTTP status. */
const restCodes: Record<string, [Code, number]> = {
  unauthenticated: [Code.Unauthenticated, 401],
  invalid_argument: [Code.InvalidArgument, 400],
};

function restClient(send: RestSend): Client {
  const login = (username: string, pw: string) =>
    send(
      "POST",
      "/auth/login",
      { "content-type": "application/json" },
      JSON.stringify({ username, password: pw }),
    );
  return {
    async login(username, pw) {
      const res = await login(username, pw);
      expect(res.status).toBe(200);
      expect(res.header("content-type")).toContain("application/json");
      const { token, token_type, expires_in } = res.json;
      return {
        token: token as string,
        tokenType: token_type as string,
        expiresIn: expires_in as number,
      };
    },
    async validate(authorization) {
      const res = await send("GET", "/auth/validate", authorization ? { authorization } : {});
      expect(res.status).toBe(200);
      const j = res.json;
      return {
        valid: j.valid as boolean,
        reason: j.reason as string,
        userId: j.user_id as string,
        username: j.username as string,
        roles: j.roles as string[],
        expiresAt: typeof j.expires_at === "string" ? new Date(j.expires_at) : undefined,
      };
    },
    async loginFailure(username, pw) {
      const res = await login(username, pw);
      const [code, httpStatus] = restCodes[res.json.code as string] ?? [Code.Unknown, 0];
      expect(res.status).toBe(httpStatus);
      const details = (res.json.details ?? []) as Record<string, unknown>[];
      const info = details.find((d) => d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo") as
        | { reason?: string; domain?: string; metadata?: { field?: string } }
        | undefined;
      return {
        code,
        reason: info?.reason,
        domain: info?.domain,
        field: info?.metadata?.field,
      };
    },
  };
}

// ---------- buf curl ----------

const run = promisify(execFile);
const bufCodes: Record<string, Code> = {
  unauthenticated: Code.Unauthenticated,
  invalid_argument: Code.InvalidArgument,
};

/** `buf curl` with the given flags; returns stdout, or the error printed on stderr. */
async function bufCurl(flags: string[], method: string, data?: object, authorization?: string) {
  const args = ["curl", ...flags, "--emit-defaults"];
  if (data) args.push("-d", JSON.stringify(data));
  if (authorization) args.push("-H", `authorization: ${authorization}`);
  args.push(`${server.url}/${identity}/${method}`);
  try {
    const { stdout } = await run(toolPath("buf"), args, { timeout: 30_000 });
    return { ok: true, json: JSON.parse(stdout) as Record<string, unknown> };
  } catch (e) {
    const { stderr, killed } = e as { stderr?: string; killed?: boolean };
    if (killed || !stderr?.trimStart().startsWith("{")) throw e;
    return { ok: false, json: JSON.parse(stderr) as Record<string, unknown> };
  }
}

function bufClient(flags: string[]): Client {
  return {
    async login(username, pw) {
      const { ok, json } = await bufCurl(flags, "Login", { username, password: pw });
      expect(ok).toBe(true);
      return json as unknown as Login;
    },
    async validate(authorization) {
      const { ok, json } = await bufCurl(flags, "Validate", {}, authorization);
      expect(ok).toBe(true);
      return {
        valid: json.valid as boolean,
        reason: json.reason as string,
        userId: json.userId as string,
        username: json.username as string,
        roles: json.roles as string[],
        expiresAt: typeof json.expiresAt === "string" ? new Date(json.expiresAt) : undefined,
      };
    },
    async loginFailure(username, pw) {
      const { ok, json } = await bufCurl(flags, "Login", { username, password: pw });
      expect(ok).toBe(false);
      // buf prints each detail's bytes (base64); decoding them ourselves works whether or not
      // buf could resolve google.rpc.ErrorInfo (reflection does not serve that file).
      const details = (json.details ?? []) as { type?: string; value?: string }[];
      const raw = details.find((d) => d.type === "google.rpc.ErrorInfo")?.value;
      const info = raw ? fromBinary(ErrorInfoSchema, Buffer.from(raw, "base64")) : undefined;
      return {
        code: bufCodes[json.code as string] ?? Code.Unknown,
        reason: info?.reason,
        domain: info?.domain,
        field: info?.metadata.field,
      };
    },
  };
}

// ---------- the same cases over every client ----------

const clients: [string, () => Client][] = [
  ["grpc-js (proto-loader from proto/ + third_party/)", grpcJsClient],
  [
    "connect-node gRPC (h2c)",
    () => connectClient(createGrpcTransport({ baseUrl: server.url, sessionManager: h2Sessions() })),
  ],
  [
    "connect-node Connect JSON over HTTP/1.1",
    () =>
      connectClient(
        createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", useBinaryFormat: false }),
      ),
  ],
  [
    "connect-node Connect JSON over HTTP/2",
    () =>
      connectClient(
        createConnectTransport({
          baseUrl: server.url,
          httpVersion: "2",
          useBinaryFormat: false,
          sessionManager: h2Sessions(),
        }),
      ),
  ],
  [
    "connect-node Connect binary over HTTP/1.1",
    () =>
      connectClient(
        createConnectTransport({ baseUrl: server.url, httpVersion: "1.1", useBinaryFormat: true }),
      ),
  ],
  [
    "connect-node gRPC-Web over HTTP/1.1",
    () => connectClient(createGrpcWebTransport({ baseUrl: server.url, httpVersion: "1.1" })),
  ],
  ["REST over HTTP/1.1 (fetch)", () => restClient(sendHttp1)],
  ["REST over h2c (node:http2)", () => restClient(h2cSender())],
  [
    "buf curl gRPC over h2c with server reflection",
    () => bufClient(["--protocol", "grpc", "--http2-prior-knowledge"]),
  ],
  [
    "buf curl Connect with --schema proto --schema third_party",
    () => bufClient(["--protocol", "connect", "--schema", "proto", "--schema", "third_party"]),
  ],
];

describe.each(clients)("%s", (_name, make) => {
  let client: Client;
  let token: string;

  beforeAll(() => {
    client = make();
  });

  it("logs in with the right password", async () => {
    const login = await client.login("alice", password);
    expect(login.tokenType).toBe("Bearer");
    expect(login.expiresIn).toBe(ttlSeconds);
    expect(login.token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    token = login.token;
  });

  it("validates the token from the authorization header", async () => {
    expect(token).toBeDefined();
    const before = Date.now();
    const v = await client.validate(bearer(token));
    expect(v).toMatchObject({ valid: true, reason: "", userId, username: "alice", roles });
    const expiresMs = v.expiresAt?.getTime() ?? 0;
    expect(expiresMs).toBeGreaterThan(before + (ttlSeconds - 60) * 1000);
    expect(expiresMs).toBeLessThanOrEqual(before + (ttlSeconds + 1) * 1000);
  });

  it("reports a missing token as valid:false, reason missing", async () => {
    expect(await client.validate()).toMatchObject({
      valid: false,
      reason: "missing",
      userId: "",
      username: "",
      roles: [],
    });
  });

  it("refuses a wrong password with UNAUTHENTICATED, reason INVALID_CREDENTIALS", async () => {
    expect(await client.loginFailure("alice", "not the password")).toEqual({
      code: Code.Unauthenticated,
      reason: "INVALID_CREDENTIALS",
      domain: "traitgate",
      field: undefined,
    });
  });

  it("refuses an empty username with INVALID_ARGUMENT naming the field", async () => {
    expect(await client.loginFailure("", password)).toEqual({
      code: Code.InvalidArgument,
      reason: "INVALID_FIELD",
      domain: "traitgate",
      field: "username",
    });
  });
});

// ---------- one listener, request ids ----------

describe("one port for every protocol", () => {
  let token: string;
  let grpcJs: ReturnType<typeof createIdentityGrpcJsClient>;
  let connectGrpc: ConnectClient<typeof IdentityService>;

  beforeAll(async () => {
    grpcJs = createIdentityGrpcJsClient(
      `127.0.0.1:${server.port}`,
      grpc.credentials.createInsecure(),
    );
    cleanups.push(() => grpcJs.close());
    connectGrpc = createClient(
      IdentityService,
      createGrpcTransport({ baseUrl: server.url, sessionManager: h2Sessions() }),
    );
    token = (await grpcJs.login({ username: "alice", password })).message.token;
  });

  it("serves REST and gRPC calls interleaved on the same port", async () => {
    const rest = async () => {
      const res = await fetch(`${server.url}/auth/validate`, {
        headers: { authorization: bearer(token) },
      });
      return ((await res.json()) as { username: string }).username;
    };
    const viaGrpcJs = async () =>
      (await grpcJs.validate({ authorization: bearer(token) })).message.username;
    const viaConnect = async () =>
      (await connectGrpc.validate({}, { headers: { authorization: bearer(token) } })).username;
    const calls = Array.from({ length: 24 }, (_, i) => [rest, viaGrpcJs, viaConnect][i % 3]!());
    expect(await Promise.all(calls)).toEqual(Array(24).fill("alice"));
  });

  it("serves a REST request and a gRPC call on one HTTP/2 connection", async () => {
    const session = http2.connect(server.url);
    cleanups.push(() => session.close());
    const request = (headers: http2.OutgoingHttpHeaders, body?: Buffer) =>
      new Promise<{
        headers: http2.IncomingHttpHeaders;
        trailers: http2.IncomingHttpHeaders;
        body: Buffer;
      }>((resolve, reject) => {
        const stream = session.request(headers);
        const chunks: Buffer[] = [];
        let head: http2.IncomingHttpHeaders = {};
        let trailers: http2.IncomingHttpHeaders = {};
        stream.on("response", (h) => {
          head = h;
        });
        stream.on("trailers", (t) => {
          trailers = t;
        });
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("error", reject);
        stream.on("end", () => resolve({ headers: head, trailers, body: Buffer.concat(chunks) }));
        stream.end(body);
      });
    const [restReply, grpcReply] = await Promise.all([
      request({ ":method": "GET", ":path": "/auth/validate", authorization: bearer(token) }),
      request(
        {
          ":method": "POST",
          ":path": `/${identity}/Validate`,
          "content-type": "application/grpc",
          te: "trailers",
          authorization: bearer(token),
        },
        Buffer.alloc(5), // one uncompressed, empty ValidateRequest frame
      ),
    ]);
    expect(restReply.headers[":status"]).toBe(200);
    expect(JSON.parse(restReply.body.toString("utf8"))).toMatchObject({
      valid: true,
      username: "alice",
    });
    expect(grpcReply.headers["content-type"]).toMatch(/^application\/grpc/);
    expect(grpcReply.trailers["grpc-status"]).toBe("0");
    expect(grpcReply.body[0]).toBe(0);
    const length = grpcReply.body.readUInt32BE(1);
    const message = fromBinary(ValidateResponseSchema, grpcReply.body.subarray(5, 5 + length));
    expect(message).toMatchObject({ valid: true, username: "alice", roles });
  });

  it("echoes x-request-id on gRPC (grpc-js and connect-node), including on errors", async () => {
    const ok = await grpcJs.validate({ "x-request-id": "grpcjs-req-1" });
    expect(ok.header.get("x-request-id")).toEqual(["grpcjs-req-1"]);

    const failed = await grpcJs
      .login({ username: "alice", password: "wrong" }, { "x-request-id": "grpcjs-req-2" })
      .then(
        () => undefined,
        (e: unknown) => e as grpc.ServiceError,
      );
    expect(failed?.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(failed?.metadata.get("x-request-id")).toEqual(["grpcjs-req-2"]);

    let echoed: string | null = null;
    await connectGrpc.validate(
      {},
      {
        headers: { "x-request-id": "connect-req-1" },
        onHeader: (h) => {
          echoed = h.get("x-request-id");
        },
      },
    );
    expect(echoed).toBe("connect-req-1");
  });

  it("echoes x-request-id on REST over HTTP/1.1 and HTTP/2", async () => {
    const h1 = await sendHttp1("GET", "/auth/validate", { "x-request-id": "rest-req-1" });
    expect(h1.header("x-request-id")).toBe("rest-req-1");
    const h2 = await h2cSender()("GET", "/auth/validate", { "x-request-id": "rest-req-2" });
    expect(h2.status).toBe(200);
    expect(h2.header("x-request-id")).toBe("rest-req-2");
  });
});
