import { connect as h2connect } from "node:http2";
import { type Socket, connect as tcpConnect } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { NodeRequest, NodeResponse } from "../../src/server/app.js";
import { listenerDefaults } from "../../src/server/limits.js";
import { type ListenOptions, listen, type RunningServer } from "../../src/server/listener.js";
import { createTestCertificate, type TestCertificate } from "../support/tls.js";
import { until } from "../support/wait.js";

/**
 * What bounds the connections a client can hold open: HTTP/2 sessions without an open
 * stream are closed after an idle timeout, connections beyond the caps (in total and per
 * client address) are closed at once, and HTTP/1.1 heads must arrive within a timeout
 * (plaintext and TLS alike).
 */

/** `/hold` answers when `release` is called; anything else at once. */
const held: Array<() => void> = [];
function app(req: NodeRequest, res: NodeResponse): void {
  if (req.url === "/hold") {
    held.push(() => res.end("released"));
    return;
  }
  res.end("ok");
}

let server: RunningServer | undefined;
const open: Socket[] = [];
afterEach(async () => {
  for (const release of held.splice(0)) release();
  for (const socket of open.splice(0)) socket.destroy();
  await server?.close(100);
  server = undefined;
});

const start = async (options: Partial<ListenOptions> = {}) => {
  server = await listen(app, { port: 0, host: "127.0.0.1", ...options });
  return server;
};

/** A TCP connection from `from` (a loopback address); resolves once connected. */
function connectFrom(port: number, from = "127.0.0.1"): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({ port, host: "127.0.0.1", localAddress: from });
    open.push(socket);
    socket.once("connect", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Resolves with what the server sent before it closed the connection. */
function closedBy(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    socket.on("data", (chunk: Buffer) => {
      got += chunk.toString("latin1");
    });
    socket.on("error", () => undefined);
    if (socket.destroyed) resolve(got);
    socket.once("close", () => resolve(got));
  });
}

/** One HTTP/1.1 request on an open socket; resolves with the status line. */
function get(socket: Socket, path = "/"): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    const onData = (chunk: Buffer) => {
      got += chunk.toString("latin1");
      if (got.includes("\r\n\r\n")) {
        socket.off("data", onData);
        resolve(got.split("\r\n", 1)[0] ?? "");
      }
    };
    socket.on("data", onData);
    socket.once("error", reject);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
  });
}

describe("HTTP/2 idle timeout", () => {
  it("closes an h2c session that has had no open stream for the idle timeout", async () => {
    const s = await start({ h2IdleTimeoutMs: 300 });
    const session = h2connect(s.url);
    session.on("error", () => undefined);
    const closed = new Promise<void>((resolve) => session.once("close", () => resolve()));
    const answered = await new Promise<string>((resolve, reject) => {
      const stream = session.request({ ":path": "/" });
      let body = "";
      stream.setEncoding("utf8");
      stream.on("data", (c: string) => {
        body += c;
      });
      stream.on("end", () => resolve(body));
      stream.on("error", reject);
    });
    expect(answered).toBe("ok");
    // The client keeps its session; the server closes it (GOAWAY), and the socket goes.
    await closed;
    await until(() => s.stats().connections === 0, 5000);
  });

  it("keeps a session while a stream is open, and closes it once the stream has ended", async () => {
    const s = await start({ h2IdleTimeoutMs: 200 });
    const session = h2connect(s.url);
    session.on("error", () => undefined);
    let closed = false;
    session.once("close", () => {
      closed = true;
    });
    const stream = session.request({ ":path": "/hold" });
    stream.resume();
    await until(() => held.length === 1, 5000);
    // Several idle timeouts pass while the stream is open: the session stays.
    await new Promise((r) => setTimeout(r, 800));
    expect(closed).toBe(false);
    held.shift()?.();
    await until(() => closed, 5000);
  });

  it("is on by default, at a bound below the 330 s the issue measured", () => {
    expect(listenerDefaults.h2IdleTimeoutMs).toBeGreaterThan(0);
    expect(listenerDefaults.h2IdleTimeoutMs).toBeLessThanOrEqual(300_000);
  });
});

describe("connection caps", () => {
  it("closes a client's connection beyond the cap per address, and not another client's", async () => {
    const s = await start({ connections: { max: 100, maxPerAddress: 2 } });
    const first = await connectFrom(s.port);
    const second = await connectFrom(s.port);
    await until(() => s.stats().connections === 2, 5000);

    const third = await connectFrom(s.port);
    expect(await closedBy(third)).toBe("");
    expect(s.stats().refusedConnections).toBe(1);
    // Another address is not held to this one's count.
    const other = await connectFrom(s.port, "127.0.0.2");
    expect(await get(other)).toBe("HTTP/1.1 200 OK");
    // The admitted connections still work, and a closed one makes room.
    expect(await get(first)).toBe("HTTP/1.1 200 OK");
    second.destroy();
    await until(() => s.stats().connections === 2, 5000);
    expect(await get(await connectFrom(s.port))).toBe("HTTP/1.1 200 OK");
  });

  it("closes connections beyond the total cap, whatever their address", async () => {
    const s = await start({ connections: { max: 2, maxPerAddress: 0 } });
    const first = await connectFrom(s.port);
    await connectFrom(s.port, "127.0.0.2");
    await until(() => s.stats().connections === 2, 5000);
    const third = await connectFrom(s.port, "127.0.0.3");
    expect(await closedBy(third)).toBe("");
    await until(() => s.stats().refusedConnections === 1, 5000);
    expect(await get(first)).toBe("HTTP/1.1 200 OK");
    // A connection that closed (after HTTP/1.1 was given it) makes room again.
    first.destroy();
    await until(() => s.stats().connections === 1, 5000);
    expect(await get(await connectFrom(s.port, "127.0.0.4"))).toBe("HTTP/1.1 200 OK");
  });

  it("refuses an h2c client beyond the cap without disturbing the admitted session", async () => {
    const s = await start({ connections: { max: 100, maxPerAddress: 1 } });
    const admitted = h2connect(s.url);
    admitted.on("error", () => undefined);
    await new Promise<void>((resolve) => admitted.once("connect", () => resolve()));
    await until(() => s.stats().connections === 1, 5000);
    const refused = h2connect(s.url);
    const outcome = await new Promise<string>((resolve) => {
      refused.once("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? "error"));
      refused.once("close", () => resolve("closed"));
    });
    expect(outcome).not.toBe("");
    const body = await new Promise<string>((resolve, reject) => {
      const stream = admitted.request({ ":path": "/" });
      let text = "";
      stream.setEncoding("utf8");
      stream.on("data", (c: string) => {
        text += c;
      });
      stream.on("end", () => resolve(text));
      stream.on("error", reject);
    });
    expect(body).toBe("ok");
    admitted.close();
  });

  it("has defaults on: a total cap and a cap per address", () => {
    expect(listenerDefaults.connections.max).toBeGreaterThan(0);
    expect(listenerDefaults.connections.maxPerAddress).toBeGreaterThan(0);
    expect(listenerDefaults.connections.maxPerAddress).toBeLessThan(
      listenerDefaults.connections.max,
    );
  });
});

describe("HTTP/1.1 header timeout", () => {
  it("lets a head take at most 30 s by default (timeout plus the interval that checks it)", () => {
    const { headersTimeoutMs, checkIntervalMs } = listenerDefaults.http1;
    expect(headersTimeoutMs + checkIntervalMs).toBeLessThanOrEqual(30_000);
  });

  describe("over TLS", () => {
    let certificate: TestCertificate;
    beforeAll(async () => {
      certificate = await createTestCertificate();
    });
    afterAll(async () => {
      await certificate?.remove();
    });

    /** Writes `text` over TLS with ALPN http/1.1; resolves with what came back before the close. */
    const tlsExchange = (port: number, text: string, from = "127.0.0.1") =>
      new Promise<string>((resolve, reject) => {
        const socket = tlsConnect({
          socket: tcpConnect({ port, host: "127.0.0.1", localAddress: from }),
          ca: certificate.cert,
          servername: "localhost",
          ALPNProtocols: ["http/1.1"],
        });
        let got = "";
        socket.on("data", (c: Buffer) => {
          got += c.toString("latin1");
        });
        socket.on("error", reject);
        socket.on("close", () => resolve(got));
        socket.once("secureConnect", () => socket.write(text));
      });

    it("answers 408 and closes when the head never finishes", async () => {
      const s = await start({
        tls: { certFile: certificate.certFile, keyFile: certificate.keyFile },
        http1: { headersTimeoutMs: 300, requestTimeoutMs: 300, checkIntervalMs: 50 },
      });
      const answer = await tlsExchange(s.port, "GET / HTTP/1.1\r\nHost: x\r\n");
      expect(answer).toMatch(/^HTTP\/1\.1 408/);
    });

    it("closes a TLS connection beyond the cap per address before its handshake", async () => {
      const s = await start({
        tls: { certFile: certificate.certFile, keyFile: certificate.keyFile },
        connections: { max: 100, maxPerAddress: 1 },
      });
      await connectFrom(s.port);
      await until(() => s.stats().connections === 1, 5000);
      await expect(tlsExchange(s.port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")).rejects.toThrow();
      expect(s.stats().refusedConnections).toBe(1);
      const other = await tlsExchange(
        s.port,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "127.0.0.2",
      );
      expect(other).toMatch(/^HTTP\/1\.1 200/);
    });

    it("closes an idle keep-alive connection after the keep-alive timeout", async () => {
      const s = await start({
        tls: { certFile: certificate.certFile, keyFile: certificate.keyFile },
        http1: { keepAliveTimeoutMs: 200 },
      });
      const answer = await tlsExchange(s.port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
      expect(answer).toMatch(/^HTTP\/1\.1 200/);
    });
  });
});
