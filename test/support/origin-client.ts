import { request } from "node:http";
import { connect as http2Connect } from "node:http2";
import { connect as tcpConnect } from "node:net";
import type { JsonReply } from "./http.js";

/**
 * Calls that arrive from a chosen loopback address (127.0.0.2, 127.0.0.3, ...) with the
 * headers a test gives, User-Agent and X-Forwarded-For included: the server then sees that
 * address as the TCP peer, as it sees a proxy or a remote client.
 */

export interface SendOptions {
  /** The local address to connect from (default 127.0.0.1). */
  from?: string;
  method?: string;
  token?: string | undefined;
  headers?: Record<string, string | string[]>;
}

/** Sends JSON (unless `body` is undefined) to `baseUrl + path` over HTTP/1.1. */
export function sendJson(
  baseUrl: string,
  path: string,
  body: unknown,
  options: SendOptions = {},
): Promise<JsonReply> {
  const { hostname, port } = new URL(baseUrl);
  const text = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: hostname,
        port,
        localAddress: options.from ?? "127.0.0.1",
        method: options.method ?? "POST",
        path,
        agent: false,
        headers: {
          ...(text === undefined ? {} : { "content-type": "application/json" }),
          ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
          ...options.headers,
        },
      },
      (res) => {
        let reply = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          reply += chunk;
        });
        res.on("end", () => {
          let json: Record<string, unknown> = {};
          try {
            json = JSON.parse(reply || "{}") as Record<string, unknown>;
          } catch {
            json = { text: reply };
          }
          const details = json.details as { reason?: string }[] | undefined;
          resolve({ status: res.statusCode ?? 0, body: json, reason: details?.[0]?.reason });
        });
      },
    );
    req.on("error", reject);
    req.end(text);
  });
}

/**
 * One gRPC call (protobuf, plain HTTP/2) of `path` with an encoded message; resolves with its
 * `grpc-status`.
 */
export function sendGrpc(
  baseUrl: string,
  path: string,
  message: Uint8Array,
  options: { from?: string; headers?: Record<string, string> } = {},
): Promise<string | undefined> {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  const { hostname, port } = new URL(baseUrl);
  const session = http2Connect(baseUrl, {
    createConnection: () =>
      tcpConnect({ host: hostname, port: Number(port), localAddress: options.from ?? "127.0.0.1" }),
  });
  return new Promise<string | undefined>((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...options.headers,
    });
    let status: string | undefined;
    const take = (h: Record<string, unknown>) => {
      if (typeof h["grpc-status"] === "string") status = h["grpc-status"];
    };
    stream.on("response", take);
    stream.on("trailers", take);
    stream.on("error", reject);
    stream.resume();
    stream.on("close", () => resolve(status));
    stream.end(frame);
  }).finally(() => session.close());
}
