import { readFileSync } from "node:fs";
import type { RequestListener as HttpRequestListener } from "node:http";
import { createSecureServer, type Http2Session } from "node:http2";
import type { AddressInfo, Server, Socket } from "node:net";
import { createServer } from "@httptoolkit/httpolyglot";
import type { NodeRequest, NodeResponse, RequestListener } from "./app.js";

export interface ListenOptions {
  port: number;
  host: string;
  tls?: { certFile: string; keyFile: string } | undefined;
}

export interface RunningServer {
  readonly port: number;
  readonly url: string;
  /** Stops accepting, lets in-flight requests finish (up to graceMs), then closes every connection. */
  close(graceMs?: number): Promise<void>;
}

/**
 * One listener for every protocol: plaintext HTTP/1.1 and h2c (HTTP/2 with
 * prior knowledge) are told apart by the connection preface, and with TLS
 * configured, ALPN picks h2 or http/1.1 on the same port.
 */
export async function listen(
  listener: RequestListener,
  options: ListenOptions,
): Promise<RunningServer> {
  const sockets = new Set<Socket>();
  const sessions = new Set<Http2Session>();
  const inflight = new Set<NodeResponse>();

  const tracked = (req: NodeRequest, res: NodeResponse) => {
    const session = "stream" in req ? req.stream.session : undefined;
    if (session && !sessions.has(session)) {
      sessions.add(session);
      session.once("close", () => sessions.delete(session));
    }
    inflight.add(res);
    res.once("close", () => inflight.delete(res));
    listener(req, res);
  };

  // With TLS, only TLS: Node's secure HTTP/2 server picks h2 or http/1.1 by ALPN and
  // never answers plaintext. Without TLS, httpolyglot tells HTTP/1.1 from h2c by the
  // connection preface. (httpolyglot given a TLS config would still answer plaintext.)
  const server: Server = options.tls
    ? createSecureServer(
        {
          cert: readFileSync(options.tls.certFile),
          key: readFileSync(options.tls.keyFile),
          allowHTTP1: true,
        },
        tracked,
      )
    : createServer(tracked as HttpRequestListener);
  server.on("connection", (socket: Socket) => {
    // Small RPC frames must not wait for Nagle's algorithm (40 ms stalls on HTTP/2).
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host = options.host === "0.0.0.0" || options.host === "::" ? "127.0.0.1" : options.host;

  return {
    port,
    url: `${options.tls ? "https" : "http"}://${host}:${port}`,
    async close(graceMs = 5000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close();
      const deadline = Date.now() + graceMs;
      while (inflight.size > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      for (const session of sessions) session.destroy();
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
