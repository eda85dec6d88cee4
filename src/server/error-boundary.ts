import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { ViolationsSchema } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { DomainError, type ErrorKind } from "../errors.js";
import type { Logger } from "../log.js";

/** The ErrorInfo domain of every error Traitgate sends. */
export const errorDomain = "traitgate";

const codeOfKind: Record<ErrorKind, Code> = {
  invalid_argument: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  aborted: Code.Aborted,
  failed_precondition: Code.FailedPrecondition,
  resource_exhausted: Code.ResourceExhausted,
  unavailable: Code.Unavailable,
  deadline_exceeded: Code.DeadlineExceeded,
  internal: Code.Internal,
};

/** The error kind of a Connect code (codes no kind has become `internal`). */
export function kindOfCode(code: Code): ErrorKind {
  if (code === Code.Canceled) return "aborted";
  for (const [kind, c] of Object.entries(codeOfKind)) if (c === code) return kind as ErrorKind;
  return "internal";
}

/** Reasons for errors that Connect itself raises, so that every error has one. */
export const reasonOfCode: Partial<Record<Code, string>> = {
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.Canceled]: "CANCELED",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.Internal]: "INTERNAL",
};

/** A google.rpc.ErrorInfo detail in Traitgate's domain. */
export function errorInfo(reason: string, metadata: Record<string, string>) {
  return {
    desc: ErrorInfoSchema,
    value: create(ErrorInfoSchema, { reason, domain: errorDomain, metadata }),
  };
}

/** The reason carried by an error's ErrorInfo detail, if any. */
export function reasonOf(err: ConnectError): string | undefined {
  return err.findDetails(ErrorInfoSchema).find((d) => d.domain === errorDomain)?.reason;
}

/**
 * Maps anything thrown by a handler to the ConnectError sent to the client:
 * domain errors keep their kind, reason and message; errors Connect raised
 * (including protovalidate's) get a reason; anything else becomes `internal`
 * with a generic message, and its cause is logged, never sent.
 */
export function toConnectError(err: unknown, log: Logger): ConnectError {
  if (err instanceof DomainError) {
    const metadata = err.field ? { ...err.metadata, field: err.field } : err.metadata;
    if (err.kind === "internal" || err.kind === "unavailable") {
      log.error({ err: err.cause ?? err, reason: err.reason }, err.message);
    }
    const headers =
      err.retryAfterSeconds === undefined
        ? undefined
        : new Headers({ "retry-after": String(Math.max(1, Math.ceil(err.retryAfterSeconds))) });
    const details = [
      errorInfo(err.reason, metadata),
      ...(err.body === undefined
        ? []
        : [{ desc: StructSchema, value: fromJson(StructSchema, err.body as JsonObject) }]),
    ];
    return new ConnectError(err.message, codeOfKind[err.kind], headers, details);
  }
  if (err instanceof ConnectError) {
    if (reasonOf(err) !== undefined) return err;
    const violations = err.findDetails(ViolationsSchema)[0]?.violations ?? [];
    if (violations.length > 0) {
      const fields = violations.map((v) =>
        (v.field?.elements ?? []).map((e) => e.fieldName).join("."),
      );
      err.details.unshift(errorInfo("INVALID_FIELD", { field: fields[0] ?? "" }));
      return err;
    }
    if (err.code === Code.Internal || err.code === Code.Unknown) {
      log.error({ err }, "internal error");
      return new ConnectError("internal error", Code.Internal, undefined, [
        errorInfo("INTERNAL", {}),
      ]);
    }
    err.details.unshift(errorInfo(reasonOfCode[err.code] ?? "ERROR", {}));
    return err;
  }
  const sqlState = (err as { code?: unknown } | null)?.code;
  if (sqlState === "22021" || sqlState === "22P05") {
    // PostgreSQL refused text it cannot store (a NUL character, invalid Unicode): the
    // request's fault, not ours. Which field is not known here; the message says what.
    return new ConnectError(
      "a text field holds a NUL character or invalid Unicode",
      Code.InvalidArgument,
      undefined,
      [errorInfo("INVALID_TEXT", {})],
    );
  }
  log.error({ err }, "unhandled error");
  return new ConnectError("internal error", Code.Internal, undefined, [errorInfo("INTERNAL", {})]);
}
