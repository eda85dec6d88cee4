import { readFileSync } from "node:fs";
import {
  createServer as createHttp1Server,
  type RequestListener as HttpRequestListener,
} from "node:http";
import {
  createServer as createH2cServer,
  createSecureServer,
  type Http2Session,
  type ServerHttp2Session,
} from "node:http2";
import {
  type AddressInfo,
  createServer as createTcpServer,
  type Server,
  type Socket,
} from "node:net";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse, RequestListener } from "./app.js";
import { guardConnections } from "./connection-gate.js";
import { closeWhenIdle } from "./h2-idle.js";
import { type ConnectionLimits, type Http1Limits, listenerDefaults } from "./limits.js";

export interface ListenOptions {
  port: number;
  host: string;
  tls?: { certFile: string; keyFile: string } | undefined;
  /** HTTP/1.1 timeouts (defaults: `listenerDefaults.http1`, src/server/limits.ts). */
  http1?: Partial<Http1Limits>;
  /** An HTTP/2 session with no open stream for this long is closed (default 120 s). */
  h2IdleTimeoutMs?: number;
  /** Caps on open connections, in total and per client address. */
  connections?: Partial<ConnectionLimits>;
  /** Where refused connections and accept failures are reported. */
  log?: Logger;
}

export interface ListenerStats {
  /** Open connections (sockets), whatever their protocol. */
  connections: number;
  /** Requests (HTTP/1.1 requests, HTTP/2 streams) being answered. */
  requests: number;
  /** Connections closed by a cap since the server started. */
  refusedConnections: number;
}

export interface RunningServer {
  readonly port: number;
  /** Where clients reach it: with every interface bound, a loopback address. */
  readonly url: string;
  stats(): ListenerStats;
  /** The address it is bound to, host:port ([v6]:port), e.g. "0.0.0.0:8080" or "127.0.0.1:8080". */
  readonly address: string;
  /** The IP address it is bound to, as the socket reports it (HOST resolved, if a name). */
  readonly boundAddress: string;
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
  const http1Limits: Http1Limits = { ...listenerDefaults.http1, ...options.http1 };
  const h2IdleTimeoutMs = options.h2IdleTimeoutMs ?? listenerDefaults.h2IdleTimeoutMs;
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
  const plaintext = options.tls ? undefined : plaintextServer(tracked, http1Limits);
  const secure = options.tls
    ? createSecureServer(
        {
          cert: readFileSync(options.tls.certFile),
          key: readFileSync(options.tls.keyFile),
          allowHTTP1: true,
          // A client that never finishes its handshake holds the socket no longer than one
          // that never sends a recognisable preface in plaintext.
          handshakeTimeout: SNIFF_TIMEOUT_MS,
        },
        tracked,
      )
    : undefined;
  // HTTP/1.1 over TLS: the same timeouts. (Without keepAliveTimeout, which Node's secure
  // HTTP/2 server leaves unset, an idle keep-alive connection would stay open for ever.)
  if (secure) Object.assign(secure, http1ServerTimeouts(http1Limits));
  const server: Server = secure ?? (plaintext?.server as Server);
  for (const h2 of [secure, plaintext?.h2c]) {
    h2?.on("session", (session: ServerHttp2Session) => closeWhenIdle(session, h2IdleTimeoutMs));
  }
  const gate = guardConnections(
    server,
    { ...listenerDefaults.connections, ...options.connections },
    options.log,
  );
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
  // After listening, an error is a connection that could not be accepted. (Out of file
  // descriptors, libuv closes such connections itself and reports only when that fails
  // too.) It costs that connection, not the process.
  server.on("error", (err: NodeJS.ErrnoException) =>
    options.log?.error(
      { error_code: err.code, syscall: err.syscall },
      "accepting a connection failed",
    ),
  );
  // The HTTP/1.1 server never listens itself; told that its port is open, it starts the
  // timer that enforces its header and request timeouts (else a slow client holds a socket).
  plaintext?.http1.emit("listening");
  const bound = server.address() as AddressInfo;
  const port = bound.port;
  const host = options.host === "0.0.0.0" || options.host === "::" ? "127.0.0.1" : options.host;

  return {
    port,
    url: `${options.tls ? "https" : "http"}://${host}:${port}`,
    stats: () => ({
      connections: sockets.size,
      requests: inflight.size,
      refusedConnections: gate.refused(),
    }),
    address: `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${port}`,
    boundAddress: bound.address,
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
  limits: Http1Limits,
): {
  server: Server;
  http1: ReturnType<typeof createHttp1Server>;
  h2c: ReturnType<typeof createH2cServer>;
} {
  const http1 = createHttp1Server(http1ServerTimeouts(limits), listener as HttpRequestListener);
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
  return { server, http1, h2c };
}

/** Node's names for the HTTP/1.1 limits (options of `http.createServer`, and properties). */
function http1ServerTimeouts(limits: Http1Limits) {
  return {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: limits.checkIntervalMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
  };
}
