import { connect as h2connect, type IncomingHttpHeaders } from "node:http2";
import { type Socket, connect as tcpConnect } from "node:net";

/**
 * A client that sends a request a piece at a time and can vanish at any moment: a TCP
 * reset (RST) of its connection, as when a client crashes or a network path drops. HTTP/1.1
 * is written by hand (`Connection: close`); HTTP/2 is Node's client on a socket this module
 * owns, so the reset is the connection's, not a stream's.
 */

export type Transport = "h1" | "h2";

export interface RawRequest {
  transport: Transport;
  path: string;
  headers: Record<string, string>;
  /** HTTP/1.1: the content-length sent (the body may stop short of it). */
  bodyLength: number;
  /**
   * Stop reading after the first bytes of the body: the rest of a large answer stays
   * with the server (HTTP/2 flow control with a small window; TCP buffers on HTTP/1.1).
   */
  stopReading?: boolean;
}

export interface RawReply {
  status: number;
  /** Response headers and trailers (HTTP/2), lower-case names. */
  headers: Record<string, string>;
  body: Buffer;
}

export interface RawCall {
  write(chunk: Buffer): void;
  /** The last of the body (HTTP/2: END_STREAM). */
  end(chunk?: Buffer): void;
  /** Resolves when the first bytes of the answer's body arrived. */
  body: Promise<void>;
  /** Resolves with the whole answer once the server finished it. */
  done: Promise<RawReply>;
  /** Resets the TCP connection. */
  reset(): void;
}

export function openRawCall(port: number, request: RawRequest): RawCall {
  const socket = tcpConnect({ port, host: "127.0.0.1", noDelay: true });
  socket.on("error", () => undefined);
  return request.transport === "h1" ? http1Call(socket, request) : http2Call(socket, request);
}

function deferred<T>() {
  let resolve: (value: T) => void = () => {};
  let reject: (err: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

function http1Call(socket: Socket, request: RawRequest): RawCall {
  const head = [
    `POST ${request.path} HTTP/1.1`,
    "host: 127.0.0.1",
    "connection: close",
    `content-length: ${request.bodyLength}`,
    ...Object.entries(request.headers).map(([k, v]) => `${k}: ${v}`),
    "",
    "",
  ].join("\r\n");
  socket.write(head);
  const body = deferred<void>();
  const done = deferred<RawReply>();
  const chunks: Buffer[] = [];
  let headEnd = -1;
  socket.on("data", (chunk: Buffer) => {
    chunks.push(chunk);
    if (headEnd < 0) headEnd = Buffer.concat(chunks).indexOf("\r\n\r\n");
    if (headEnd >= 0 && Buffer.concat(chunks).length > headEnd + 4) {
      body.resolve();
      if (request.stopReading) socket.pause();
    }
  });
  socket.once("close", () => {
    const all = Buffer.concat(chunks);
    const end = all.indexOf("\r\n\r\n");
    if (end < 0) return done.reject(new Error("connection closed before an answer"));
    const [statusLine = "", ...lines] = all.subarray(0, end).toString("latin1").split("\r\n");
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(":");
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    done.resolve({
      status: Number(statusLine.split(" ")[1]),
      headers,
      body: all.subarray(end + 4),
    });
  });
  return {
    write: (chunk) => socket.write(chunk),
    end: (chunk) => {
      if (chunk) socket.write(chunk);
    },
    body: body.promise,
    done: done.promise,
    reset: () => socket.resetAndDestroy(),
  };
}

function http2Call(socket: Socket, request: RawRequest): RawCall {
  const session = h2connect("http://127.0.0.1", {
    createConnection: () => socket,
    // A window smaller than a large answer: unread, the rest cannot be sent.
    ...(request.stopReading ? { settings: { initialWindowSize: 16 * 1024 } } : {}),
  });
  session.on("error", () => undefined);
  const stream = session.request(
    { ":method": "POST", ":path": request.path, ...request.headers },
    { endStream: false },
  );
  stream.on("error", () => undefined);
  const body = deferred<void>();
  const done = deferred<RawReply>();
  const chunks: Buffer[] = [];
  const headers: Record<string, string> = {};
  let status = 0;
  const take = (h: IncomingHttpHeaders) => {
    for (const [k, v] of Object.entries(h)) if (typeof v === "string") headers[k] = v;
  };
  stream.on("response", (h) => {
    status = Number(h[":status"]);
    take(h);
  });
  stream.on("trailers", take);
  stream.on("data", (chunk: Buffer) => {
    chunks.push(chunk);
    body.resolve();
    if (request.stopReading) stream.pause();
  });
  stream.on("end", () => {
    done.resolve({ status, headers, body: Buffer.concat(chunks) });
    session.close();
  });
  stream.on("close", () => done.reject(new Error("stream closed before the answer ended")));
  return {
    write: (chunk) => stream.write(chunk),
    end: (chunk) => (chunk ? stream.end(chunk) : stream.end()),
    body: body.promise,
    done: done.promise,
    reset: () => socket.resetAndDestroy(),
  };
}

/** A gRPC / gRPC-Web / Connect-streaming envelope: flags, length, message. */
export function envelope(message: Uint8Array, flags = 0): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame[0] = flags;
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}
