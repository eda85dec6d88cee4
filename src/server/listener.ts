import { readFileSync } from "node:fs";
import {
  createServer as createHttp1Server,
  type RequestListener as HttpRequestListener,
} from "node:http";
import { createServer as createH2cServer, createSecureServer, type Http2Session } from "node:http2";
import {
  type AddressInfo,
  createServer as createTcpServer,
  type Server,
  type Socket,
} from "node:net";
import type { NodeRequest, NodeResponse, RequestListener } from "./app.js";

export interface ListenOptions {
  port: number;
  host: string;
  tls?: { certFile: string; keyFile: string } | undefined;
  /**
   * HTTP/1.1 limits (Node's defaults: 60 s to receive a request's headers, 300 s for the
   * whole request, checked every 30 s); for tests.
   */
  http1?: { headersTimeoutMs?: number; requestTimeoutMs?: number; checkIntervalMs?: number };
}

export interface RunningServer {
  readonly port: number;
  /** Where clients reach it: with every interface bound, a loopback address. */
  readonly url: string;
  /** The address it is bound to, host:port ([v6]:port), e.g. "0.0.0.0:8080" or "127.0.0.1:8080". */
  readonly address: string;
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
  // never answers plaintext. Without TLS, the connection preface tells HTTP/1.1 from h2c.
  const plaintext = options.tls ? undefined : plaintextServer(tracked, options.http1 ?? {});
  const server: Server = options.tls
    ? createSecureServer(
        {
          cert: readFileSync(options.tls.certFile),
          key: readFileSync(options.tls.keyFile),
          allowHTTP1: true,
        },
        tracked,
      )
    : (plaintext?.server as Server);
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
  // The HTTP/1.1 server never listens itself; told that its port is open, it starts the
  // timer that enforces its header and request timeouts (else a slow client holds a socket).
  plaintext?.http1.emit("listening");
  const bound = server.address() as AddressInfo;
  const port = bound.port;
  const host = options.host === "0.0.0.0" || options.host === "::" ? "127.0.0.1" : options.host;

  return {
    port,
    url: `${options.tls ? "https" : "http"}://${host}:${port}`,
    address: `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${port}`,
    async close(graceMs = 5000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Stops its timeout timer and closes its idle keep-alive connections.
      plaintext?.http1.close();
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

/** What every HTTP/2 connection starts with (RFC 9113 §3.4). */
const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** A connection that has not sent enough bytes to be told apart by then is closed. */
const SNIFF_TIMEOUT_MS = 10_000;

/**
 * Plaintext HTTP/1.1 and h2c on one port. The first bytes of a connection are
 * read; if they are the HTTP/2 preface the socket goes to an HTTP/2 server,
 * otherwise to an HTTP/1.1 server (which answers 400 to what it cannot parse).
 * The bytes read are put back, and the socket keeps its native handle, so
 * Node's HTTP/2 session reads it directly. (A general-purpose sniffer such as
 * httpolyglot marks the handle as not a native stream, which routes every h2c
 * byte through a JavaScript stream wrapper; measured here, that wrapper cost
 * about 15 % of a raw HTTP/2 server's throughput and ~10 % of the CPU of a
 * gRPC call.)
 */
function plaintextServer(
  listener: RequestListener,
  timeouts: NonNullable<ListenOptions["http1"]>,
): { server: Server; http1: ReturnType<typeof createHttp1Server> } {
  const http1 = createHttp1Server(
    {
      ...(timeouts.headersTimeoutMs !== undefined
        ? { headersTimeout: timeouts.headersTimeoutMs }
        : {}),
      ...(timeouts.requestTimeoutMs !== undefined
        ? { requestTimeout: timeouts.requestTimeoutMs }
        : {}),
      ...(timeouts.checkIntervalMs !== undefined
        ? { connectionsCheckingInterval: timeouts.checkIntervalMs }
        : {}),
    },
    listener as HttpRequestListener,
  );
  const h2c = createH2cServer(listener);
  const server = createTcpServer((socket) => {
    let seen: Buffer | undefined;
    const dispatch = (to: typeof http1 | typeof h2c) => {
      socket.off("readable", onReadable);
      socket.off("error", onError);
      socket.setTimeout(0);
      socket.off("timeout", onTimeout);
      if (seen) socket.unshift(seen);
      to.emit("connection", socket);
    };
    const onReadable = () => {
      for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read()) {
        seen = seen ? Buffer.concat([seen, chunk]) : chunk;
      }
      if (!seen) return;
      const n = Math.min(seen.length, H2_PREFACE.length);
      if (!seen.subarray(0, n).equals(H2_PREFACE.subarray(0, n))) return dispatch(http1);
      if (n === H2_PREFACE.length) return dispatch(h2c);
      // A prefix of the preface so far: wait for more.
    };
    const onError = () => socket.destroy();
    const onTimeout = () => socket.destroy();
    socket.on("readable", onReadable);
    socket.on("error", onError);
    socket.setTimeout(SNIFF_TIMEOUT_MS);
    socket.on("timeout", onTimeout);
  });
  return { server, http1 };
}
