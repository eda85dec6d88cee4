import { DomainError, unavailable } from "../errors.js";

/**
 * Failures that mean "the database cannot be reached right now" (not "this statement is
 * wrong"): refused or dropped connections, connect timeouts, a server shutting down. They
 * become one DomainError `unavailable` / DATABASE_UNAVAILABLE (503), so every area answers
 * the same clear error, and recover by themselves once the database is back. The driver's
 * error stays the cause (for the log line), never the message.
 */

const networkCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
]);

/** SQLSTATEs: class 08 (connection exception), shutdowns, too many connections. */
const unavailableStates = new Set(["57P01", "57P02", "57P03", "53300"]);

const driverMessages =
  /^(Connection terminated|timeout exceeded when trying to connect|timeout expired|Client has encountered a connection error|Client was closed and is not queryable)/;

export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string") {
    if (networkCodes.has(code) || unavailableStates.has(code) || /^08[0-9A-Z]{3}$/.test(code)) {
      return true;
    }
  }
  if (driverMessages.test(err.message)) return true;
  // pg-pool wraps a connect timeout; AggregateError carries each address's refusal.
  if (err instanceof AggregateError) return err.errors.some(isConnectionError);
  return err.cause !== undefined && err.cause !== err && isConnectionError(err.cause);
}

export const databaseUnavailableReason = "DATABASE_UNAVAILABLE";

/** The error to throw: a DomainError `unavailable` for connection failures, err otherwise. */
export function asUnavailable(err: unknown): unknown {
  if (err instanceof DomainError || !isConnectionError(err)) return err;
  return unavailable(
    databaseUnavailableReason,
    "the database is not reachable at the moment; try again shortly",
    { cause: err, retryAfterSeconds: 1 },
  );
}

/** The same, for a promise. */
export function mapUnavailable<T>(work: Promise<T>): Promise<T> {
  return work.catch((err: unknown) => {
    throw asUnavailable(err);
  });
}
