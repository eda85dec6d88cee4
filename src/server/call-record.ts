import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import type { ConnectError, Interceptor } from "@connectrpc/connect";
import { type CallRecord, callRecordKey } from "./context.js";
import { reasonOf, reasonOfCode } from "./error-boundary.js";
import { codeOfHttpStatus } from "./http-status.js";
import type { ResolvedOrigin } from "./origin.js";

/**
 * The record of one call (`CallRecord`, a context value): started by the listener when a
 * request arrives, filled in by the layers the call passes (the REST transcoder, the gRPC
 * path, the interceptors), and read once the call has ended, for its access log line and,
 * when it was refused before its method ran, for its module's record of the refusal
 * (src/server/call-end.ts).
 */

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

/** A call's request id: the client's `x-request-id` when it is sane, a new UUID otherwise. */
export function requestIdOf(header: string | string[] | null | undefined): string {
  return typeof header === "string" && requestIdPattern.test(header) ? header : randomUUID();
}

/**
 * The record of a request that just arrived, from where it came from (src/server/origin.ts).
 * Its request id goes back on every answer as `x-request-id`, also on those given before any
 * handler ran (404, 413).
 */
export function startCall(
  req: { headers: IncomingHttpHeaders },
  res: { setHeader(name: string, value: string): unknown },
  protocol: string,
  origin: ResolvedOrigin,
): CallRecord {
  const requestId = requestIdOf(req.headers["x-request-id"]);
  res.setHeader("x-request-id", requestId);
  return {
    requestId,
    clientAddress: origin.clientAddress,
    ...(origin.peerAddress === origin.clientAddress ? {} : { peerAddress: origin.peerAddress }),
    userAgent: origin.userAgent,
    started: performance.now(),
    protocol,
    refusalReported: false,
    handled: false,
  };
}

/** The protocol of a request to a method's path, by its content type. */
export function protocolOf(contentType: string | undefined): string {
  if (contentType?.startsWith("application/grpc-web")) return "grpc-web";
  if (contentType?.startsWith("application/grpc")) return "grpc";
  return "connect";
}

/** Records an outcome: 0 for a success, else a Connect code and the error's reason. */
export function noteOutcome(call: CallRecord | undefined, code: number, reason?: string): void {
  if (call === undefined) return;
  call.code = code;
  call.reason = reason;
}

/** Records an error (as sent: mapped by the error boundary) as the call's outcome. */
export function noteError(call: CallRecord | undefined, err: ConnectError): void {
  noteOutcome(call, err.code, reasonOf(err) ?? reasonOfCode[err.code]);
}

/**
 * The outcome of a call answered by Connect's own handler, when no interceptor saw it
 * (e.g. a message over readMaxBytes, which Connect refuses before the interceptors run):
 * its gRPC status, or else its HTTP status.
 */
export function noteAnswered(
  call: CallRecord,
  answer: { status: number; header?: Headers | undefined; trailer?: Headers | undefined },
): void {
  if (call.code !== undefined) return;
  const grpcStatus =
    answer.trailer?.get("grpc-status") ?? answer.header?.get("grpc-status") ?? null;
  noteOutcome(call, grpcStatus !== null ? Number(grpcStatus) : codeOfHttpStatus(answer.status));
}

/**
 * The innermost interceptor: marks the call as handled, i.e. past authentication and
 * validation, so that its own area records it from here on.
 */
export const markHandled: Interceptor = (next) => (req) => {
  const call = req.contextValues.get(callRecordKey);
  if (call !== undefined) call.handled = true;
  return next(req);
};
