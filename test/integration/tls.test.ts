import * as http from "node:http";
import * as http2 from "node:http2";
import * as https from "node:https";
import type { TLSSocket } from "node:tls";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { createIdentityGrpcJsClient, statusDetails } from "../support/grpc-js.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTestCertificate, type TestCertificate } from "../support/tls.js";

/**
 * With TLS_CERT_FILE / TLS_KEY_FILE the one port speaks TLS: REST over
 * HTTPS/1.1 and h2 (ALPN), gRPC over TLS for connect-node and grpc-js, and no
 * normal answer to plaintext.
 */

const password = "quiet harbour lantern 4721";
let certificate: TestCertificate;
let server: TestServer;
let userId: string;
let token: string;
const cleanups: (() => void | Promise<void>)[] = [];

beforeAll(async () => {
  certificate = await createTestCertificate();
  server = await startTestServer({
    env: { TLS_CERT_FILE: certificate.certFile, TLS_KEY_FILE: certificate.keyFile },
  });
  userId = await server.createUser("alice", password, ["clinician"]);
  httpsAgent = new https.Agent({ ca: certificate.cert, ALPNProtocols: ["http/1.1"] });
  cleanups.push(() => httpsAgent.destroy());
});
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  await server?.close();
  await certificate?.remove();
});

const bearer = () => ({ authorization: `Bearer ${token}` });

interface HttpsReply {
  status: number;
  httpVersion: string;
  alpn: string | false | null;
  authorized: boolean;
  json: Record<string, unknown>;
}

/** Trusts only the test certificate and offers only http/1.1 by ALPN. */
let httpsAgent: https.Agent;

/** One request over HTTPS/1.1. */
function httpsRequest(
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<HttpsReply> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${server.url}${path}`,
      { method, headers, agent: httpsAgent },
      (res) => {
        const socket = res.socket as TLSSocket;
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            httpVersion: res.httpVersion,
            alpn: socket.alpnProtocol,
            authorized: socket.authorized,
            json: JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>,
          }),
        );
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe("TLS on the one port", () => {
  it("serves REST over HTTPS/1.1", async () => {
    expect(server.url).toBe(`https://127.0.0.1:${server.port}`);
    const login = await httpsRequest(
      "POST",
      "/auth/login",
      { "content-type": "application/json" },
      JSON.stringify({ username: "alice", password }),
    );
    expect(login).toMatchObject({
      status: 200,
      httpVersion: "1.1",
      alpn: "http/1.1",
      authorized: true,
    });
    expect(login.json).toMatchObject({ token_type: "Bearer", expires_in: 900 });
    token = login.json.token as string;
    expect(token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);

    const validate = await httpsRequest("GET", "/auth/validate", bearer());
    expect(validate.status).toBe(200);
    expect(validate.json).toMatchObject({
      valid: true,
      user_id: userId,
      username: "alice",
      roles: ["clinician"],
    });
  });

  it("serves REST over h2, negotiated by ALPN", async () => {
    const session = http2.connect(server.url, { ca: certificate.cert });
    cleanups.push(() => session.close());
    const get = (path: string, headers: Record<string, string>) =>
      new Promise<{ status: number; json: Record<string, unknown> }>((resolve, reject) => {
        const stream = session.request({ ":method": "GET", ":path": path, ...headers });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.on("response", (h) => {
          status = Number(h[":status"]);
        });
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("error", reject);
        stream.on("end", () =>
          resolve({ status, json: JSON.parse(Buffer.concat(chunks).toString("utf8")) }),
        );
        stream.end();
      });
    const valid = await get("/auth/validate", bearer());
    expect(session.alpnProtocol).toBe("h2");
    expect(session.encrypted).toBe(true);
    expect(valid).toMatchObject({ status: 200, json: { valid: true, username: "alice" } });
    expect(await get("/auth/validate", {})).toMatchObject({
      status: 200,
      json: { valid: false, reason: "missing" },
    });
  });

  it("serves gRPC over TLS to connect-node", async () => {
    const sessionManager = new Http2SessionManager(server.url, undefined, { ca: certificate.cert });
    cleanups.push(() => sessionManager.abort());
    const client = createClient(
      IdentityService,
      createGrpcTransport({ baseUrl: server.url, sessionManager }),
    );
    const login = await client.login({ username: "alice", password });
    expect(login.tokenType).toBe("Bearer");
    const v = await client.validate({}, { headers: { authorization: `Bearer ${login.token}` } });
    expect(v).toMatchObject({ valid: true, userId, username: "alice", roles: ["clinician"] });

    const err = await client.login({ username: "alice", password: "wrong password" }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.Unauthenticated);
    expect(err?.findDetails(ErrorInfoSchema)[0]?.reason).toBe("INVALID_CREDENTIALS");
  });

  it("describes itself with https URLs, over REST and over gRPC", async () => {
    const rest = await httpsRequest("GET", "/.well-known/openid-configuration", {});
    expect(rest.status).toBe(200);
    expect(rest.json).toMatchObject({
      jwks_uri: `${server.url}/.well-known/jwks.json`,
      token_endpoint: `${server.url}/auth/token`,
    });
    const client = createClient(
      IdentityService,
      createGrpcTransport({ baseUrl: server.url, nodeOptions: { ca: certificate.cert } }),
    );
    const viaGrpc = await client.getOpenIdConfiguration({});
    expect(viaGrpc.tokenEndpoint).toBe(`${server.url}/auth/token`);
  });

  it("passes nodeOptions.ca through createGrpcTransport", async () => {
    // The form callers write without their own session manager.
    const transport = createGrpcTransport({
      baseUrl: server.url,
      nodeOptions: { ca: certificate.cert },
    });
    const client = createClient(IdentityService, transport);
    const v = await client.validate({}, { headers: bearer() });
    expect(v).toMatchObject({ valid: true, username: "alice" });
  });

  it("serves gRPC over TLS to grpc-js with createSsl", async () => {
    const client = createIdentityGrpcJsClient(
      `127.0.0.1:${server.port}`,
      grpc.credentials.createSsl(certificate.cert),
    );
    cleanups.push(() => client.close());
    const { message: login } = await client.login({ username: "alice", password });
    expect(login.token_type).toBe("Bearer");
    const { message: v } = await client.validate({ authorization: `Bearer ${login.token}` });
    expect(v).toMatchObject({ valid: true, user_id: userId, username: "alice" });

    const err = await client.login({ username: "alice", password: "wrong password" }).then(
      () => undefined,
      (e: unknown) => e as grpc.ServiceError,
    );
    expect(err?.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(statusDetails(err).errorInfo[0]?.reason).toBe("INVALID_CREDENTIALS");
  });

  it("refuses a client that does not trust the certificate", async () => {
    await expect(
      new Promise((resolve, reject) => {
        const req = https.get(`${server.url}/healthz`, { agent: false }, resolve);
        req.on("error", reject);
      }),
    ).rejects.toMatchObject({ code: "DEPTH_ZERO_SELF_SIGNED_CERT" });
  });

  // Plaintext on the TLS port gets no answer (the listener serves TLS only when configured).
  it("gives plaintext HTTP/1.1 no normal answer", async () => {
    const outcome = await new Promise<number | string>((resolve) => {
      const req = http.get(
        `http://127.0.0.1:${server.port}/auth/validate`,
        { agent: false, timeout: 5000 },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on("timeout", () => req.destroy(new Error("timeout")));
      req.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    });
    expect(outcome).not.toBe(200);
  });

  it("gives plaintext h2c no normal answer", async () => {
    const outcome = await new Promise<number | string>((resolve) => {
      const session = http2.connect(`http://127.0.0.1:${server.port}`);
      const done = (value: number | string) => {
        session.destroy();
        resolve(value);
      };
      session.on("error", (e: NodeJS.ErrnoException) => done(e.code ?? e.message));
      session.on("close", () => done("closed"));
      session.setTimeout(5000, () => done("timeout"));
      const stream = session.request({ ":path": "/auth/validate" });
      stream.on("response", (h) => done(Number(h[":status"])));
      stream.on("error", (e: NodeJS.ErrnoException) => done(e.code ?? e.message));
      stream.on("close", () => done(`stream closed, code ${stream.rstCode}`));
      stream.end();
    });
    expect(outcome).not.toBe(200);
  });
});
