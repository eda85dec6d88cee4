import { connect as h2connect } from "node:http2";
import { type Socket, connect as tcpConnect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { NodeRequest, NodeResponse } from "../../src/server/app.js";
import { listen, type RunningServer } from "../../src/server/listener.js";

/** Answers with the HTTP version and the class of the socket under the request. */
function echoProtocol(req: NodeRequest, res: NodeResponse): void {
  const socket = "stream" in req ? req.stream.session?.socket : req.socket;
  res.setHeader("content-type", "text/plain");
  res.end(`${req.httpVersion} ${socket?.constructor.name ?? "none"}`);
}

/** Writes `parts` one by one (each in its own TCP segment), returns everything read. */
function rawExchange(port: number, parts: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket: Socket = tcpConnect({ port, host: "127.0.0.1", noDelay: true });
    let answer = "";
    socket.on("data", (chunk: Buffer) => {
      answer += chunk.toString("latin1");
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(answer));
    socket.once("connect", async () => {
      for (const part of parts) {
        socket.write(part);
        await new Promise((r) => setTimeout(r, 20));
      }
    });
  });
}

describe("plaintext listener: HTTP/1.1 and h2c on one port", () => {
  let server: RunningServer | undefined;
  afterEach(async () => {
    await server?.close(100);
    server = undefined;
  });

  it("hands h2c connections to HTTP/2 on the native socket, not a JavaScript stream wrapper", async () => {
    server = await listen(echoProtocol, { port: 0, host: "127.0.0.1" });
    const session = h2connect(server.url);
    try {
      const body = await new Promise<string>((resolve, reject) => {
        const stream = session.request({ ":path": "/" });
        let text = "";
        stream.setEncoding("utf8");
        stream.on("data", (chunk: string) => {
          text += chunk;
        });
        stream.on("end", () => resolve(text));
        stream.on("error", reject);
        stream.end();
      });
      // A wrapper (JSStreamSocket) routes every byte of the session through JavaScript.
      expect(body).toMatch(/^2\.0 /);
      expect(body).not.toMatch(/JSStream/);
      expect(body).toMatch(/Socket$/);
    } finally {
      session.close();
    }
  });

  it("says the address it is bound to, which the URL may not (every interface → a loopback URL)", async () => {
    server = await listen(echoProtocol, { port: 0, host: "0.0.0.0" });
    expect(server.address).toBe(`0.0.0.0:${server.port}`);
    expect(server.url).toBe(`http://127.0.0.1:${server.port}`);
    await server.close();
    server = await listen(echoProtocol, { port: 0, host: "::1" });
    expect(server.address).toBe(`[::1]:${server.port}`);
  });

  it("tells the two apart when the first bytes arrive in pieces", async () => {
    server = await listen(echoProtocol, { port: 0, host: "127.0.0.1" });
    // "P" is a prefix of both "POST" and the HTTP/2 preface "PRI * ...": more must be read.
    const http1 = await rawExchange(server.port, [
      "P",
      "OST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ]);
    expect(http1).toMatch(/^HTTP\/1\.1 200/);
    expect(http1).toMatch(/1\.1 Socket$/);

    // The preface split across segments still reaches the HTTP/2 server, which answers with
    // its SETTINGS frame (type 0x4 in the fourth byte of the first frame).
    const h2 = await new Promise<Buffer>((resolve, reject) => {
      const socket = tcpConnect({ port: server?.port ?? 0, host: "127.0.0.1", noDelay: true });
      socket.once("data", (chunk: Buffer) => {
        socket.destroy();
        resolve(chunk);
      });
      socket.on("error", reject);
      socket.once("connect", async () => {
        for (const part of ["PRI * HT", "TP/2.0\r\n\r", "\nSM\r\n\r\n", "\0\0\0\x04\0\0\0\0\0"]) {
          socket.write(Buffer.from(part, "latin1"));
          await new Promise((r) => setTimeout(r, 20));
        }
      });
    });
    expect(h2[3]).toBe(0x4);
  });

  it("closes an HTTP/1.1 connection whose request headers never finish (408)", async () => {
    server = await listen(echoProtocol, {
      port: 0,
      host: "127.0.0.1",
      http1: { headersTimeoutMs: 300, requestTimeoutMs: 300, checkIntervalMs: 50 },
    });
    // Never sends the blank line that ends the head: a slow (or slowloris) client.
    const answer = await rawExchange(server.port, ["GET / HTTP/1.1\r\nHost: x\r\n"]);
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
  });

  it("answers what is neither with HTTP/1.1's 400", async () => {
    server = await listen(echoProtocol, { port: 0, host: "127.0.0.1" });
    const answer = await rawExchange(server.port, ["\x16\x03\x01 not a request\r\n\r\n"]);
    expect(answer).toMatch(/^HTTP\/1\.1 400/);
  });
});
