import { request } from "node:http";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { defaultThrottlePolicy } from "../../src/identity/throttle.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Throttling end to end. Clients bind to different loopback addresses
 * (127.0.0.2, 127.0.0.3) to be told apart by the server, as remote clients are.
 */

const password = "victims-password-is-long";
// The documented policy, with the account-wide slow-down bounded at 1 s to keep the test short.
const policy = {
  ...defaultThrottlePolicy,
  account: { ...defaultThrottlePolicy.account, maxDelayMs: 1_000 },
};
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ throttlePolicy: policy });
  await server.createUser("victim", password);
});
afterAll(async () => server?.close());

function login(from: string, pw: string) {
  const { port } = new URL(server.url);
  return new Promise<{ status: number; retryAfter: string | undefined; body: string }>(
    (resolve, reject) => {
      const req = request(
        {
          host: "127.0.0.1",
          port,
          localAddress: from,
          method: "POST",
          path: "/auth/login",
          headers: { "content-type": "application/json" },
        },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => {
            body += c;
          });
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, retryAfter: res.headers["retry-after"], body }),
          );
        },
      );
      req.on("error", reject);
      req.end(JSON.stringify({ username: "victim", password: pw }));
    },
  );
}

describe("login throttling", () => {
  it("answers 429 with Retry-After once an address keeps failing, and the victim still gets in from elsewhere", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) {
      const res = await login("127.0.0.2", `wrong-guess-${i}`);
      statuses.push(res.status);
      if (res.status === 429) {
        expect(Number(res.retryAfter)).toBeGreaterThanOrEqual(1);
        expect(JSON.parse(res.body)).toMatchObject({
          code: "resource_exhausted",
          details: [{ reason: "TOO_MANY_ATTEMPTS" }],
        });
      }
    }
    expect(statuses.slice(0, policy.pair.free)).toEqual(Array(policy.pair.free).fill(401));
    expect(statuses.slice(policy.pair.free)).toContain(429);
    // The right password from the attacking address is refused too, for now.
    expect((await login("127.0.0.2", password)).status).toBe(429);
    // From an address that has not failed, the victim logs in (slowed by at most maxDelayMs).
    const victim = await login("127.0.0.3", password);
    expect(victim.status).toBe(200);
    expect(JSON.parse(victim.body).token).toBeTruthy();
  });

  it("is resource_exhausted with a retry-after header over gRPC", async () => {
    const client = createClient(IdentityService, createGrpcTransport({ baseUrl: server.url }));
    let last: ConnectError | undefined;
    for (let i = 0; i < policy.pair.free + 1; i++) {
      last = await client.login({ username: "victim", password: `grpc-wrong-${i}` }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    }
    expect(last?.code).toBe(Code.ResourceExhausted);
    expect(last?.findDetails(ErrorInfoSchema)[0]?.reason).toBe("TOO_MANY_ATTEMPTS");
    expect(Number(last?.metadata.get("retry-after"))).toBeGreaterThanOrEqual(1);
  });
});
