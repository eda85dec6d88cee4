import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { registerHealth, type ServingStatus } from "../../src/server/health.js";

const identity = "traitgate.identity.v1.IdentityService";
const intervalMs = 50;

/** A checker the tests flip, counting its calls. */
const checker = {
  status: "SERVING" as ServingStatus | "THROW",
  calls: 0,
  async check(): Promise<ServingStatus> {
    this.calls++;
    if (this.status === "THROW") throw new Error("database down");
    return this.status;
  },
};

function routes(router: ConnectRouter): void {
  registerHealth(router, [identity], checker, { watchIntervalMs: intervalMs });
}

interface CheckReply {
  status: string;
}
interface HealthClient extends grpc.Client {
  Check(
    req: { service: string },
    cb: (err: grpc.ServiceError | null, res?: CheckReply) => void,
  ): void;
  List(
    req: object,
    cb: (err: grpc.ServiceError | null, res?: { statuses: Record<string, CheckReply> }) => void,
  ): void;
  Watch(req: { service: string }): grpc.ClientReadableStream<CheckReply>;
}

let server: http2.Http2Server;
let client: HealthClient;
const sessions = new Set<http2.ServerHttp2Session>();

beforeAll(async () => {
  server = http2.createServer(connectNodeAdapter({ routes }));
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const def = protoLoader.loadSync("grpc/health/v1/health.proto", {
    includeDirs: ["third_party"],
    keepCase: true,
    enums: String,
    defaults: true,
  });
  const pkg = grpc.loadPackageDefinition(def) as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  const Health = pkg.grpc.health.v1.Health;
  client = new Health(
    `127.0.0.1:${port}`,
    grpc.credentials.createInsecure(),
  ) as unknown as HealthClient;
});

afterAll(async () => {
  client.close();
  for (const s of sessions) s.destroy();
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  checker.status = "SERVING";
});

function check(service: string): Promise<CheckReply> {
  return new Promise((resolve, reject) =>
    client.Check({ service }, (err, res) => (err ? reject(err) : resolve(res!))),
  );
}

/** Collects the statuses a Watch stream sends, and lets a test wait for the nth one. */
function watch(service: string) {
  const call = client.Watch({ service });
  const seen: string[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  call.on("data", (r: CheckReply) => {
    seen.push(r.status);
    for (const w of waiters.filter((w) => seen.length >= w.n)) w.resolve();
  });
  call.on("error", () => {}); // cancellation ends the stream with CANCELLED
  return {
    seen,
    call,
    until: (n: number) =>
      new Promise<void>((resolve, reject) => {
        if (seen.length >= n) return resolve();
        waiters.push({ n, resolve });
        setTimeout(() => reject(new Error(`only saw ${JSON.stringify(seen)}`)), 5000).unref();
      }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("grpc.health.v1.Health over gRPC", () => {
  it("checks the server and each named service", async () => {
    expect(await check("")).toEqual({ status: "SERVING" });
    expect(await check(identity)).toEqual({ status: "SERVING" });
  });

  it("is NOT_FOUND for an unknown service", async () => {
    await expect(check("no.such.Service")).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
  });

  it("reports NOT_SERVING when the checker says so or fails", async () => {
    checker.status = "NOT_SERVING";
    expect(await check("")).toEqual({ status: "NOT_SERVING" });
    checker.status = "THROW";
    expect(await check(identity)).toEqual({ status: "NOT_SERVING" });
  });

  it("lists every known service", async () => {
    const res = await new Promise<{ statuses: Record<string, CheckReply> }>((resolve, reject) =>
      client.List({}, (err, r) => (err ? reject(err) : resolve(r!))),
    );
    expect(res.statuses).toEqual({ "": { status: "SERVING" }, [identity]: { status: "SERVING" } });
  });

  it("watches: current status, then each change, polling only while watched", async () => {
    const w = watch("");
    await w.until(1);
    expect(w.seen).toEqual(["SERVING"]);
    await sleep(intervalMs * 3);
    expect(w.seen).toEqual(["SERVING"]); // no message without a change
    checker.status = "NOT_SERVING";
    await w.until(2);
    checker.status = "SERVING";
    await w.until(3);
    expect(w.seen).toEqual(["SERVING", "NOT_SERVING", "SERVING"]);

    w.call.cancel();
    await sleep(intervalMs * 2);
    const calls = checker.calls;
    await sleep(intervalMs * 5);
    expect(checker.calls).toBe(calls);
  });

  it("watches an unknown service as SERVICE_UNKNOWN without ending the stream", async () => {
    const w = watch("no.such.Service");
    let ended = false;
    w.call.on("end", () => {
      ended = true;
    });
    await w.until(1);
    expect(w.seen).toEqual(["SERVICE_UNKNOWN"]);
    await sleep(intervalMs * 3);
    expect(ended).toBe(false);
    w.call.cancel();
  });
});
