import { connect as h2connect } from "node:http2";
import { connect as tcpConnect } from "node:net";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { TranscodingTestService } from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { DomainError, unauthenticated } from "../../src/errors.js";
import { createLogger } from "../../src/log.js";
import { createApp, type ServiceModule } from "../../src/server/app.js";
import { principalKey } from "../../src/server/context.js";
import { type AuthRule, publicMethod, requireAuth } from "../../src/server/interceptors.js";
import { listen, type RunningServer } from "../../src/server/listener.js";

/**
 * The server's cross-cutting behaviour on a test service: authentication is
 * required unless a method is declared public, roles are checked, errors are
 * mapped in one place (internal causes logged, never sent), unknown gRPC
 * methods are UNIMPLEMENTED, and shutdown lets in-flight calls finish.
 */

const svc = TranscodingTestService.typeName;
const users: Record<
  string,
  { userId: string; username: string; roles: string[]; sessionId: string }
> = {
  "admin-token": { userId: "u1", username: "root", roles: ["admin"], sessionId: "s1" },
  "viewer-token": { userId: "u2", username: "vera", roles: ["viewer"], sessionId: "s2" },
};
let slowMs = 0;
/** Told when GetDefaultShelf starts (the shutdown test waits for its call to be in flight). */
let onShelfCall: () => void = () => {};
let failWith: unknown = new Error("boom");

const module: ServiceModule = {
  services: [TranscodingTestService],
  authRules: new Map<string, AuthRule>([
    [`${svc}/WhoAmI`, requireAuth({ roles: ["admin"] })],
    [`${svc}/GetDefaultShelf`, publicMethod],
  ]),
  register(router) {
    router.service(TranscodingTestService, {
      async whoAmI(_req, ctx) {
        return { client: ctx.values.get(principalKey)?.username ?? "" };
      },
      async getDefaultShelf() {
        onShelfCall();
        await new Promise((r) => setTimeout(r, slowMs));
        return {};
      },
      async fail() {
        throw failWith;
      },
    });
  },
};

const logs: string[] = [];
let server: RunningServer;

async function start(): Promise<RunningServer> {
  const { listener } = createApp({
    modules: [module],
    authenticator: {
      async authenticate(authorization) {
        const user = users[(authorization ?? "").replace(/^Bearer /, "")];
        if (!user) throw unauthenticated("MISSING", "no valid token");
        return { kind: "user", ...user };
      },
    },
    health: { check: async () => "SERVING" },
    log: createLogger({ level: "debug", destination: { write: (l: string) => void logs.push(l) } }),
    maxBodyBytes: 1 << 20,
  });
  return listen(listener, { port: 0, host: "127.0.0.1" });
}

beforeAll(async () => {
  server = await start();
});
afterAll(async () => server?.close());

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function rest(path: string, init: RequestInit = {}) {
  const res = await fetch(`${server.url}${path}`, init);
  const body = (await res.json()) as {
    code?: string;
    message?: string;
    details?: { reason?: string }[];
  };
  return { status: res.status, body, reason: body.details?.[0]?.reason };
}

describe("authentication and roles", () => {
  it("requires a token for a protected method, over REST and gRPC", async () => {
    expect(await rest("/v1/whoami")).toMatchObject({ status: 401, reason: "MISSING" });
    const client = createClient(
      TranscodingTestService,
      createGrpcTransport({ baseUrl: server.url }),
    );
    const err = await client.whoAmI({}).catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unauthenticated);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("MISSING");
  });

  it("refuses a user without the role with 403 ROLE, and lets the right role through", async () => {
    expect(await rest("/v1/whoami", { headers: bearer("viewer-token") })).toMatchObject({
      status: 403,
      reason: "ROLE",
      body: { code: "permission_denied" },
    });
    const ok = await rest("/v1/whoami", { headers: bearer("admin-token") });
    expect(ok).toMatchObject({ status: 200, body: { client: "root" } });
  });

  it("fails closed: a method without a rule needs a token", async () => {
    const res = await rest("/v1/fail", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(401);
  });

  it("lets anyone call a public method", async () => {
    expect((await rest("/v1/shelves/default")).status).toBe(200);
  });
});

describe("one error boundary", () => {
  const callFail = () =>
    rest("/v1/fail", {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer("admin-token") },
      body: "{}",
    });

  it("maps a domain error to its code and reason", async () => {
    failWith = new DomainError("permission_denied", "NOT_YOURS", "not yours");
    expect(await callFail()).toMatchObject({
      status: 403,
      reason: "NOT_YOURS",
      body: { message: "not yours" },
    });
    failWith = new DomainError("unavailable", "DATABASE_DOWN", "database unavailable");
    expect(await callFail()).toMatchObject({ status: 503, reason: "DATABASE_DOWN" });
  });

  it("turns an unknown error into a generic internal error, logging the cause", async () => {
    failWith = new Error("connection to postgres://app:hunter2@db failed");
    const res = await callFail();
    expect(res).toMatchObject({
      status: 500,
      reason: "INTERNAL",
      body: { code: "internal", message: "internal error" },
    });
    expect(JSON.stringify(res.body)).not.toContain("hunter2");
    expect(logs.join("")).toContain("connection to postgres");
  });
});

describe("transport edges", () => {
  it("answers a gRPC call to an unknown method with UNIMPLEMENTED", async () => {
    const session = h2connect(server.url);
    const headers = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const stream = session.request({
        ":method": "POST",
        ":path": "/no.such.Service/Method",
        "content-type": "application/grpc",
        te: "trailers",
      });
      stream.on("response", (h) => resolve(h as Record<string, unknown>));
      stream.on("error", reject);
      stream.end(Buffer.alloc(5));
    });
    session.close();
    expect(headers["grpc-status"]).toBe(String(Code.Unimplemented));
  });

  it("answers 400 to an HTTP/1.0 call without a Host header, and keeps serving", async () => {
    // Connect's request adapter throws when it cannot tell the request's authority; thrown
    // out of the listener, that stopped the process (last-resort guard: not a connection
    // error). Every RPC path takes Connect's adapter.
    const { port } = new URL(server.url);
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = tcpConnect(Number(port), "127.0.0.1", () => {
        socket.end(
          "POST /traitgate.testing.v1.TranscodingTestService/GetDefaultShelf HTTP/1.0\r\n" +
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        );
      });
      let text = "";
      socket.on("data", (c: Buffer) => {
        text += c.toString();
      });
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
    });
    expect(reply).toMatch(/^HTTP\/1\.[01] 400 /);
    expect(reply).toContain("MISSING_HOST");
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  it("finishes in-flight requests on shutdown, then refuses new connections", async () => {
    const own = await start();
    slowMs = 300;
    const started = new Promise<void>((resolve) => {
      onShelfCall = resolve;
    });
    const inflight = fetch(`${own.url}/v1/shelves/default`);
    await started;
    onShelfCall = () => {};
    const closing = own.close(5000);
    const res = await inflight;
    expect(res.status).toBe(200);
    await closing;
    slowMs = 0;
    await expect(fetch(`${own.url}/v1/shelves/default`)).rejects.toThrow();
  });

  it("sends GOAWAY to open HTTP/2 sessions on shutdown", async () => {
    const own = await start();
    const session = h2connect(own.url);
    await new Promise<void>((resolve, reject) => {
      const stream = session.request({ ":path": "/healthz" });
      stream.on("error", reject);
      stream.resume();
      stream.on("end", resolve);
    });
    let goaway = false;
    session.once("goaway", () => {
      goaway = true;
    });
    const sessionClosed = new Promise<void>((resolve) => session.once("close", () => resolve()));
    await own.close(2000);
    await sessionClosed;
    // A graceful GOAWAY, not a dropped connection.
    expect(goaway).toBe(true);
  });
});
