import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createConnectGuard } from "../../src/gateway/connect-guard.js";
import { createForwarder } from "../../src/gateway/forwarder.js";
import { createHostPolicy, systemResolver } from "../../src/gateway/host-policy.js";

/**
 * The forwarder against a real HTTP server: a caller that goes away before or during the
 * hop ends the call as `aborted`, and never leaves an outgoing request without an error
 * listener (an unhandled `error` event would stop the process).
 */

let server: Server;
let port: number;
const held: Array<() => void> = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url === "/slow") {
      held.push(() => res.end("{}"));
      return;
    }
    req.resume();
    req.on("end", () => res.end('{"ok":true}'));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  for (const release of held) release();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** Plugins may be reached on loopback here (the test server's address). */
const guard = createConnectGuard({
  policy: createHostPolicy({ allowedHosts: ["127.0.0.1"] }),
  resolve: systemResolver,
});

const call = (path: string, signal?: AbortSignal) => ({
  host: "127.0.0.1",
  port,
  path,
  body: Buffer.from("{}"),
  headers: {},
  timeoutMs: 5000,
  ...(signal ? { signal } : {}),
});

/** Resolves after the event loop has had a chance to deliver a late `error` event. */
const settleLoop = () => new Promise((resolve) => setTimeout(resolve, 50));

describe("forwarder", () => {
  it("ends a call whose caller already left as aborted, without an unhandled error", async () => {
    const forwarder = createForwarder({ maxReplyBytes: 1024, guard });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on("uncaughtException", onUncaught);
    try {
      const result = await forwarder.forward(call("/echo", AbortSignal.abort()));
      expect(result.kind).toBe("aborted");
      await settleLoop();
      expect(uncaught).toEqual([]);
    } finally {
      process.off("uncaughtException", onUncaught);
      forwarder.close();
    }
  });

  it("ends a call whose caller leaves mid-hop as aborted, and keeps serving", async () => {
    const forwarder = createForwarder({ maxReplyBytes: 1024, guard });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on("uncaughtException", onUncaught);
    try {
      const leaving = new AbortController();
      const pending = forwarder.forward(call("/slow", leaving.signal));
      while (held.length === 0) await new Promise((r) => setTimeout(r, 5));
      leaving.abort();
      expect((await pending).kind).toBe("aborted");
      await settleLoop();
      expect(uncaught).toEqual([]);
      const next = await forwarder.forward(call("/echo"));
      expect(next).toMatchObject({ kind: "reply", status: 200 });
    } finally {
      process.off("uncaughtException", onUncaught);
      forwarder.close();
    }
  });
});

describe("a guard that is still working out the core's own addresses", () => {
  /** A guard whose answer never comes (a listener name whose lookup hangs). */
  const waiting = { ...guard, target: () => new Promise<never>(() => {}) };

  it("holds the call's timeout and its caller's signal meanwhile", async () => {
    const forwarder = createForwarder({ maxReplyBytes: 1024, guard: waiting });
    const request = { host: "127.0.0.1", port, path: "/", body: Buffer.from("{}"), headers: {} };
    expect(await forwarder.forward({ ...request, timeoutMs: 50 })).toEqual({ kind: "timeout" });
    const leaving = new AbortController();
    const call = forwarder.forward({ ...request, timeoutMs: 60_000, signal: leaving.signal });
    leaving.abort();
    expect(await call).toEqual({ kind: "aborted" });
    forwarder.close();
  });
});
