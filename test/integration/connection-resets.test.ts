import { connect as h2connect } from "node:http2";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openTestDatabase } from "../support/database.js";
import {
  type Framed,
  type Protocol,
  protocols,
  useCredentials,
} from "../support/gateway-protocols.js";
import { type HoldingDatabase, holdingDatabase } from "../support/held-database.js";
import { type HeldPlugin, startHeldPlugin } from "../support/held-plugin.js";
import { openRawCall, type RawCall } from "../support/raw-client.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { until } from "../support/wait.js";

/**
 * A client may vanish (TCP reset) at any point of a call. For every phase of a gateway call
 * (head only, half the body, while authenticating, while the handler reads the database, while
 * the call is with the plugin, while the answer streams) and every protocol (REST over
 * HTTP/1.1 and h2c, gRPC, gRPC-Web, Connect), the client resets its connection at that point,
 * and then the process must have raised no uncaught error (which would stop `traitgate serve`)
 * and must still answer a call of that protocol. The database and the plugin hold the call
 * where the phase needs it (no sleeps), so each case resets at the point it names. (The server
 * runs in the test process, where vitest's own listener keeps an uncaught error from stopping
 * anything: the cases collect such errors themselves and require none.)
 */

const system = { kind: "system" as const, id: "" };
const meta = { requestId: "connection-resets-setup" };
const password = "connection-resets-admin-pw";

let db: HoldingDatabase;
let server: TestServer;
let plugin: HeldPlugin;
let caller = "";
let admin = { token: "", key: "" };
/** Added to the clock: moving it on by more than the caches' 1 s makes them read again. */
let skew = 0;
const coldCaches = () => {
  skew += 2000;
};

const uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);

beforeAll(async () => {
  process.on("uncaughtException", onUncaught);
  process.on("unhandledRejection", onUncaught);
  db = holdingDatabase(await openTestDatabase());
  server = await startTestServer({
    db: db.db,
    clock: { now: () => Date.now() + skew },
    env: { HTTP2_IDLE_TIMEOUT_MS: "1000" },
  });
  plugin = await startHeldPlugin(512 * 1024);
  const { core } = server;
  await core.plugins.register(
    system,
    meta,
    {
      id: "held",
      name: "held",
      pluginType: "internal",
      endpoints: { hold: "/hold", echo: "/echo", big: "/big" },
      host: "127.0.0.1",
      port: plugin.port,
      traits: [],
    },
    false,
  );
  const { clientSecret } = await core.serviceAccounts.create({ userId: "", kind: "system" }, meta, {
    name: "ai-core",
    description: "",
    roles: ["service"],
  });
  caller = (
    await core.serviceAccounts.issueToken("ai-core", clientSecret, {
      ...meta,
      clientAddress: "127.0.0.1",
    })
  ).token;
  await core.allowlist.put(system, meta, {
    caller: "ai-core",
    target: "held",
    operations: ["hold", "echo", "big"],
  });
  await server.createUser("root", password, ["admin"]);
  const login = await core.identity.login("root", password, {
    ...meta,
    clientAddress: "127.0.0.1",
  });
  admin = { token: login.token, key: await server.createApiKey(["audit:read"]) };
  useCredentials({ caller: () => caller, admin: () => admin });
});

afterAll(async () => {
  process.off("uncaughtException", onUncaught);
  process.off("unhandledRejection", onUncaught);
  db?.releaseAll();
  await server?.close();
  await plugin?.close();
});

afterEach(() => db.releaseAll());

let sequence = 0;
const nextRequestId = (label: string) => `reset-${label}-${++sequence}`;

function send(p: Protocol, framed: Framed, stopReading = false): RawCall {
  return openRawCall(server.port, {
    transport: p.transport,
    path: framed.path,
    headers: framed.headers,
    bodyLength: framed.body.length,
    stopReading,
  });
}

const requests = () => server.core.server.stats().requests;

/** Waits until the call with this request id has ended on the server (its access line). */
const ended = (requestId: string) =>
  until(
    () =>
      server.logs.some(
        (l) => l.includes(`"request_id":"${requestId}"`) && l.includes('"msg":"call"'),
      ),
    10_000,
  );

/** After a reset: the server saw the client go, raised nothing, and still serves `p`. */
async function expectStillServing(p: Protocol): Promise<void> {
  await until(() => requests() === 0, 10_000);
  const framed = p.call("echo", nextRequestId("check"));
  const check = send(p, framed);
  check.end(framed.body);
  expect(p.outcome(await check.done)).toBe("ok");
  // Ended on the server too, so that the next case counts only its own request.
  await until(() => requests() === 0, 10_000);
  // Taken, so that each case reports only its own.
  expect(uncaught.splice(0)).toEqual([]);
}

describe.each(protocols)("a client that resets its connection, over $name", (p) => {
  it("after sending only the head", async () => {
    const framed = p.call("hold", nextRequestId("head"));
    const call = send(p, framed);
    await until(() => requests() === 1, 10_000);
    call.reset();
    await expectStillServing(p);
  });

  it("halfway through the body", async () => {
    const framed = p.call("hold", nextRequestId("body"));
    const call = send(p, framed);
    call.write(framed.body.subarray(0, framed.body.length >> 1));
    await until(() => requests() === 1, 10_000);
    call.reset();
    await expectStillServing(p);
  });

  it("while the call is being authenticated", async () => {
    coldCaches();
    const hold = db.hold(/FROM service_accounts WHERE id = \$1$/);
    const id = nextRequestId("auth");
    const framed = p.call("hold", id);
    const before = plugin.received.get("/hold") ?? 0;
    const call = send(p, framed);
    call.end(framed.body);
    await hold.reached;
    call.reset();
    await until(() => requests() === 0, 10_000);
    hold.release();
    await ended(id);
    // The caller had left: the plugin never got the call.
    expect(plugin.received.get("/hold") ?? 0).toBe(before);
    await expectStillServing(p);
  });

  it("while the handler waits for the database", async () => {
    coldCaches();
    const hold = db.hold(/FROM plugins WHERE id = \$1$/);
    const id = nextRequestId("db");
    const framed = p.call("hold", id);
    const before = plugin.received.get("/hold") ?? 0;
    const call = send(p, framed);
    call.end(framed.body);
    await hold.reached;
    call.reset();
    await until(() => requests() === 0, 10_000);
    hold.release();
    await ended(id);
    expect(plugin.received.get("/hold") ?? 0).toBe(before);
    await expectStillServing(p);
  });

  it("while the call is with the plugin", async () => {
    const id = nextRequestId("plugin");
    const framed = p.call("hold", id);
    const call = send(p, framed);
    call.end(framed.body);
    const held = await plugin.nextHeld();
    call.reset();
    // The core gives up on the hop when its caller is gone.
    await held.closed;
    await ended(id);
    await expectStillServing(p);
  });

  it("while the answer is streaming", async () => {
    const id = nextRequestId("stream");
    // A server stream on the RPC protocols (the server is in its streaming loop). On REST, a
    // long answer: over h2c, a small flow-control window keeps most of it with the server;
    // over HTTP/1.1 the kernel takes all of it unread (loopback buffers hold megabytes), so
    // there this is a client that leaves after the first bytes of the answer.
    const framed = p.watch?.(id) ?? p.call("big", id);
    const call = send(p, framed, true);
    call.end(framed.body);
    await call.body;
    call.reset();
    await expectStillServing(p);
  });
});

describe.each(protocols.filter((p) => p.watch !== undefined))(
  "a deadline that passes while the handler waits for the database, over $name",
  (p) => {
    it("ends the call as deadline_exceeded without forwarding it, and the process serves on", async () => {
      coldCaches();
      const hold = db.hold(/FROM plugins WHERE id = \$1$/);
      const framed = p.call("hold", nextRequestId("deadline"), 1);
      const before = plugin.received.get("/hold") ?? 0;
      const call = send(p, framed);
      call.end(framed.body);
      await hold.reached;
      // The 1 ms deadline timer started before the hold was reached, so it fires before
      // this later and longer one.
      await new Promise((resolve) => setTimeout(resolve, 5));
      hold.release();
      expect(p.outcome(await call.done)).toBe("deadline_exceeded");
      expect(plugin.received.get("/hold") ?? 0).toBe(before);
      await expectStillServing(p);
    });
  },
);

describe("the core's listener", () => {
  it("closes an h2c connection idle for HTTP2_IDLE_TIMEOUT_MS (1 s here)", async () => {
    const session = h2connect(server.url);
    session.on("error", () => undefined);
    await new Promise<void>((resolve) => session.once("connect", () => resolve()));
    await new Promise<void>((resolve) => session.once("close", () => resolve()));
    await until(() => server.core.server.stats().connections === 0, 10_000);
  });
});
