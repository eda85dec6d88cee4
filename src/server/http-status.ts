import { Code } from "@connectrpc/connect";

/**
 * HTTP status for each Connect code on the REST paths (decisions.md §0),
 * following the standard gRPC-to-HTTP table.
 */
const statusOfCode: Record<Code, number> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

export function httpStatusOf(code: Code): number {
  return statusOfCode[code] ?? 500;
}

/** Connect's lowercase snake_case name of a code, e.g. "invalid_argument". */
export function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}
