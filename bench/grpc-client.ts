import { type ClientHttp2Session, connect } from "node:http2";
import { connect as netConnect } from "node:net";

/**
 * A minimal gRPC client over h2c sessions (one unless told more; calls go to them in turn):
 * messages are framed once by the caller, answers come back as the response message's bytes
 * with the status checked. It costs the client far less CPU than a gRPC library, so a
 * benchmark that shares the machine with the server measures the server. Every service in a
 * run can be driven by it alike. Several connections reach several processes of a server
 * whose processes share a port (node:cluster hands out connections, not calls).
 */
export interface RawGrpcClient {
  /** Sends one framed request; resolves with the answer's message bytes (grpc-status 0). */
  call(path: string, frame: Buffer, headers?: Record<string, string>): Promise<Buffer>;
  /** The local port of each open connection (to tell which server process holds it). */
  localPorts(): number[];
  close(): void;
}
/** A message with gRPC's 5-byte prefix (uncompressed, big-endian length). */
export function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

export function rawGrpcClient(url: string, options: { connections?: number } = {}): RawGrpcClient {
  const { hostname, port } = new URL(url);
  // Each connected on first use (a server may still be starting), again after a failure.
  const sessions: (ClientHttp2Session | undefined)[] = Array.from(
    { length: Math.max(1, options.connections ?? 1) },
    () => undefined,
  );
  let next = 0;
  const open = () => {
    const k = next;
    next = (next + 1) % sessions.length;
    const session = sessions[k];
    if (session !== undefined && !session.closed && !session.destroyed) return session;
    const opened = connect(url, {
      createConnection: () => netConnect({ host: hostname, port: Number(port), noDelay: true }),
    });
    // Failures reach the calls on it; the next call connects again.
    opened.on("error", () => {
      if (sessions[k] === opened) sessions[k] = undefined;
    });
    sessions[k] = opened;
    return opened;
  };
  const call = (path: string, frame: Buffer, headers: Record<string, string> = {}) =>
    new Promise<Buffer>((resolve, reject) => {
      const stream = open().request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
        ...headers,
      });
      const chunks: Buffer[] = [];
      let status: string | undefined;
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("trailers", (t) => {
        status = String(t["grpc-status"]);
      });
      stream.on("response", (h) => {
        // Trailers-only answers carry the status in the headers.
        if (h["grpc-status"] !== undefined) status = String(h["grpc-status"]);
      });
      stream.on("error", reject);
      stream.on("end", () => {
        if (status !== "0") return reject(new Error(`${path}: grpc-status ${status}`));
        const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
        resolve(body.subarray(5));
      });
      stream.end(frame);
    });
  return {
    call,
    localPorts: () =>
      sessions.flatMap((s) =>
        s?.socket?.localPort === undefined || s.closed ? [] : [s.socket.localPort],
      ),
    close: () => {
      for (const s of sessions) s?.close();
    },
  };
}
