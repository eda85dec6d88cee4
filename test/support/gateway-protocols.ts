import { create, toBinary } from "@bufbuild/protobuf";
import {
  CallRequestSchema,
  WatchOperatorCallsRequestSchema,
} from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { envelope, type RawReply, type Transport } from "./raw-client.js";

/**
 * Gateway calls (of plugin `held`, as caller `ai-core`) and WatchOperatorCalls streams as
 * each protocol frames them by hand, for clients that send them a piece at a time
 * (test/support/raw-client.ts): REST over HTTP/1.1 and h2c, gRPC, gRPC-Web, Connect. Set
 * the bearer tokens with `useCredentials` before framing.
 */

const credentials = {
  caller: () => "",
  admin: () => ({ token: "", key: "" }),
};

/** Where the tokens come from: the caller's (a service account), and an admin's with an API key. */
export function useCredentials(from: typeof credentials): void {
  Object.assign(credentials, from);
}

/** How one protocol frames a gateway call and a WatchOperatorCalls stream, and reads the outcome. */
export interface Protocol {
  name: string;
  transport: Transport;
  call(operation: string, requestId: string, deadlineMs?: number): Framed;
  /** A server-streaming call (none on REST). */
  watch?(requestId: string): Framed;
  /** "ok", or the error's code name. */
  outcome(reply: RawReply): string;
}
export interface Framed {
  path: string;
  headers: Record<string, string>;
  body: Buffer;
}

const callPath = "/traitgate.gateway.v1.GatewayService/Call";
const watchPath = "/traitgate.gateway.v1.GatewayService/WatchOperatorCalls";
const callMessage = (operation: string) =>
  toBinary(
    CallRequestSchema,
    create(CallRequestSchema, { pluginId: "held", operation, callerPlugin: "ai-core" }),
  );
const watchMessage = () =>
  toBinary(
    WatchOperatorCallsRequestSchema,
    create(WatchOperatorCallsRequestSchema, { afterSeq: 1n }),
  );
const auth = (requestId: string) => ({
  authorization: `Bearer ${credentials.caller()}`,
  "x-request-id": requestId,
});
const adminAuth = (requestId: string) => ({
  authorization: `Bearer ${credentials.admin().token}`,
  "x-api-key": credentials.admin().key,
  "x-request-id": requestId,
});
const grpcCodes: Record<string, string> = { "0": "ok", "4": "deadline_exceeded" };

const rest = (transport: Transport): Protocol => ({
  name: `REST over ${transport === "h1" ? "HTTP/1.1" : "h2c"}`,
  transport,
  call: (operation, requestId) => ({
    path: `/gateway/held/${operation}`,
    headers: { "content-type": "application/json", ...auth(requestId) },
    body: Buffer.from(JSON.stringify({ caller_plugin: "ai-core", payload: {} })),
  }),
  outcome: (reply) =>
    reply.status === 200 ? "ok" : String(JSON.parse(reply.body.toString()).code ?? reply.status),
});

const enveloped = (contentType: string, transport: Transport, name: string): Protocol => ({
  name,
  transport,
  call: (operation, requestId, deadlineMs) => ({
    path: callPath,
    headers: {
      "content-type": contentType,
      te: "trailers",
      ...auth(requestId),
      ...(deadlineMs !== undefined ? { "grpc-timeout": `${deadlineMs}m` } : {}),
    },
    body: envelope(callMessage(operation)),
  }),
  watch: (requestId) => ({
    path: watchPath,
    headers: { "content-type": contentType, te: "trailers", ...adminAuth(requestId) },
    body: envelope(watchMessage()),
  }),
  outcome: (reply) => {
    // gRPC: a trailer; gRPC-Web: the trailer frame at the end of the body.
    const status =
      reply.headers["grpc-status"] ?? /grpc-status:\s*(\d+)/.exec(reply.body.toString())?.[1];
    return grpcCodes[status ?? ""] ?? `grpc-status ${status}`;
  },
});

const connect: Protocol = {
  name: "Connect over HTTP/1.1",
  transport: "h1",
  call: (operation, requestId, deadlineMs) => ({
    path: callPath,
    headers: {
      "content-type": "application/json",
      "connect-protocol-version": "1",
      ...auth(requestId),
      ...(deadlineMs !== undefined ? { "connect-timeout-ms": String(deadlineMs) } : {}),
    },
    body: Buffer.from(JSON.stringify({ pluginId: "held", operation, callerPlugin: "ai-core" })),
  }),
  watch: (requestId) => ({
    path: watchPath,
    headers: {
      "content-type": "application/connect+json",
      "connect-protocol-version": "1",
      ...adminAuth(requestId),
    },
    body: envelope(Buffer.from(JSON.stringify({ afterSeq: "1" }))),
  }),
  outcome: (reply) =>
    reply.status === 200 ? "ok" : String(JSON.parse(reply.body.toString()).code ?? reply.status),
};

export const protocols: Protocol[] = [
  rest("h1"),
  rest("h2"),
  enveloped("application/grpc", "h2", "gRPC"),
  enveloped("application/grpc-web+proto", "h1", "gRPC-Web over HTTP/1.1"),
  connect,
];
