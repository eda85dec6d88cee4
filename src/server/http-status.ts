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

/** The code of each status in the table above (the most general code where several share one). */
const codeOfStatus = new Map<number, Code>([
  [400, Code.InvalidArgument],
  [401, Code.Unauthenticated],
  [403, Code.PermissionDenied],
  [404, Code.NotFound],
  [409, Code.Aborted],
  [429, Code.ResourceExhausted],
  [499, Code.Canceled],
  [500, Code.Internal],
  [501, Code.Unimplemented],
  [503, Code.Unavailable],
  [504, Code.DeadlineExceeded],
]);

/**
 * The code of an answer known only by its HTTP status (an error Connect's own handler
 * answered before any interceptor saw the call): 0 for a success, Unknown when no code has it.
 */
export function codeOfHttpStatus(status: number): Code | 0 {
  if (status >= 200 && status < 300) return 0;
  return codeOfStatus.get(status) ?? Code.Unknown;
}

/** Connect's lowercase snake_case name of a code, e.g. "invalid_argument". */
export function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}
