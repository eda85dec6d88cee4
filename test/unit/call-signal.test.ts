import { EventEmitter, once } from "node:events";
import { createServer as createHttpServer, request as httpRequest } from "node:http";
import { constants, createServer as createH2Server, connect as http2Connect } from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CallSignal } from "../../src/server/unary.js";
import { countAbortControllers } from "../support/abort-controllers.js";

/**
 * A call's signal (src/server/unary.ts): made only when something asks for it, and then in
 * the state its moment calls for: Canceled once the client has gone, DeadlineExceeded once
 * the deadline has passed, "the call has finished" after the end.
 */

const reasonOf = (signal: AbortSignal) => ConnectError.from(signal.reason);

afterEach(() => {
  vi.restoreAllMocks();
  vi.useRealTimers();
});

describe("CallSignal", () => {
  it("makes no AbortController, and no timer, for a call that never asks for its signal", () => {
    const counted = countAbortControllers();
    vi.useFakeTimers();
    try {
      const res = new EventEmitter();
      const call = new CallSignal(res);
      call.setDeadline(1_000);
      expect(call.remainingMs()).toBeGreaterThan(900);
      expect(vi.getTimerCount()).toBe(0);
      call.end();
      res.emit("close");
      expect(counted.made).toBe(0);
    } finally {
      counted.restore();
    }
  });

  it("aborts Canceled when the client goes, whether the signal was asked for before or after", () => {
    const res = new EventEmitter();
    const before = new CallSignal(res);
    const early = before.signal;
    const late = new CallSignal(res);
    res.emit("close");
    expect(early.aborted).toBe(true);
    expect(reasonOf(early).code).toBe(Code.Canceled);
    expect(reasonOf(early).rawMessage).toBe("the client closed the request");
    expect(reasonOf(late.signal).rawMessage).toBe("the client closed the request");
    // Ending afterwards keeps the first reason.
    before.end();
    expect(reasonOf(early).rawMessage).toBe("the client closed the request");
  });

  it("says the call has finished once it has ended, and a close after that changes nothing", () => {
    const res = new EventEmitter();
    const asked = new CallSignal(res);
    const signal = asked.signal;
    const notAsked = new CallSignal(res);
    asked.end();
    notAsked.end();
    res.emit("close");
    expect(reasonOf(signal).rawMessage).toBe("the call has finished");
    expect(reasonOf(notAsked.signal).rawMessage).toBe("the call has finished");
    expect(reasonOf(notAsked.signal).code).toBe(Code.Canceled);
  });

  it("aborts DeadlineExceeded when the deadline passes, or at once if it passed before the signal was asked for", () => {
    vi.useFakeTimers();
    const res = new EventEmitter();
    const waiting = new CallSignal(res);
    waiting.setDeadline(50);
    const signal = waiting.signal;
    const late = new CallSignal(res);
    late.setDeadline(50);
    vi.advanceTimersByTime(49);
    expect(signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(reasonOf(signal).code).toBe(Code.DeadlineExceeded);
    expect(late.remainingMs()).toBeLessThanOrEqual(0);
    expect(reasonOf(late.signal).code).toBe(Code.DeadlineExceeded);
  });

  it("knows a client that left before the call began (the response closed already)", () => {
    // HTTP/1.1: the response's `closed`; HTTP/2 (compat): its stream's `closed`.
    for (const res of [
      Object.assign(new EventEmitter(), { closed: true }),
      Object.assign(new EventEmitter(), { stream: { closed: true } }),
    ]) {
      const call = new CallSignal(res);
      expect(call.signal.aborted).toBe(true);
      expect(reasonOf(call.signal).code).toBe(Code.Canceled);
    }
    // Not closed: nothing yet.
    const open = new CallSignal(Object.assign(new EventEmitter(), { stream: { closed: false } }));
    expect(open.signal.aborted).toBe(false);
  });

  it("says DeadlineExceeded when the deadline passed before the client left, Canceled when after", () => {
    vi.useFakeTimers();
    const res = new EventEmitter();
    const lateClient = new CallSignal(res);
    lateClient.setDeadline(50);
    const otherRes = new EventEmitter();
    const earlyClient = new CallSignal(otherRes);
    earlyClient.setDeadline(50);
    vi.advanceTimersByTime(30);
    otherRes.emit("close");
    vi.advanceTimersByTime(30);
    res.emit("close");
    // Neither signal was asked for before: each says what one made at the start would have.
    expect(reasonOf(lateClient.signal).code).toBe(Code.DeadlineExceeded);
    expect(reasonOf(earlyClient.signal).code).toBe(Code.Canceled);
  });

  it("stops the deadline's timer when the call ends", () => {
    vi.useFakeTimers();
    const call = new CallSignal(new EventEmitter());
    call.setDeadline(50);
    const signal = call.signal;
    call.end();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(100);
    expect(reasonOf(signal).rawMessage).toBe("the call has finished");
  });

  it("on real servers: a live client's response is open; one that left has closed it (HTTP/1.1 and HTTP/2)", async () => {
    // What CallSignal reads of a response: a wrong property name would pass the fakes above.
    const seen: { live: boolean; left: boolean }[] = [];
    const h1 = createHttpServer((req, res) => {
      const live = !new CallSignal(res).signal.aborted;
      req.socket.once("close", () => {
        seen.push({ live, left: new CallSignal(res).signal.aborted });
      });
    });
    await new Promise<void>((resolve) => h1.listen(0, "127.0.0.1", resolve));
    const call = httpRequest({ port: (h1.address() as AddressInfo).port, method: "POST" });
    call.on("error", () => {});
    call.write("x");
    await new Promise((resolve) => setTimeout(resolve, 50));
    call.destroy();
    await new Promise((resolve) => setTimeout(resolve, 50));
    h1.close();

    const h2 = createH2Server((_req, res) => {
      const live = !new CallSignal(res).signal.aborted;
      res.stream.once("close", () => {
        seen.push({ live, left: new CallSignal(res).signal.aborted });
      });
    });
    await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
    const session = http2Connect(`http://127.0.0.1:${(h2.address() as AddressInfo).port}`);
    const stream = session.request({ ":method": "POST", ":path": "/" });
    stream.on("error", () => {});
    stream.write("x");
    await new Promise((resolve) => setTimeout(resolve, 50));
    stream.close(constants.NGHTTP2_CANCEL);
    await once(stream, "close");
    await new Promise((resolve) => setTimeout(resolve, 50));
    session.close();
    h2.close();
    expect(seen).toEqual([
      { live: true, left: true },
      { live: true, left: true },
    ]);
  });
});
