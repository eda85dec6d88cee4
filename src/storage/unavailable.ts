import { DomainError, unavailable } from "../errors.js";

/**
 * Failures that mean "the database cannot be reached right now" (not "this statement is
 * wrong"): refused or dropped connections, connect and acquire timeouts, a statement the
 * server did not answer in time, a server shutting down. They become one DomainError
 * `unavailable` / DATABASE_UNAVAILABLE (503, Retry-After: 1), so every area answers the
 * same clear error, and recover by themselves once the database is back. The driver's
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

/**
 * A prepared statement the connection no longer has (26000: deallocated behind the driver's
 * back), or whose cached plan a migration made stale ("cached plan must not change result
 * type"): every later use on that connection would fail the same way, so it is closed.
 */
const stalePreparedStatement = (code: string, message: string) =>
  code === "26000" || (code === "0A000" && message.startsWith("cached plan must not change"));

/** SQLSTATE query_canceled: statement_timeout fired on the server (the connection is fine). */
const statementTimeoutState = "57014";

const driverMessages =
  /^(Connection terminated|timeout exceeded when trying to connect|timeout expired|Client has encountered a connection error|Client was closed and is not queryable|Query read timeout)/;

/**
 * Our own bound ran out: no connection within the acquire timeout, or no answer to a
 * statement within the statement timeout (the server may be frozen: connections accepted,
 * nothing answered).
 */
export class DatabaseTimeoutError extends Error {
  override readonly name = "DatabaseTimeoutError";
  constructor(what: "connection" | "statement", ms: number) {
    super(`no database ${what} within ${ms} ms`);
  }
}

/**
 * The connection failed or cannot be trusted any more (its statement timed out on our side:
 * the answer may still come, so it must be closed, never used again).
 */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err instanceof DatabaseTimeoutError) return true;
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string") {
    if (networkCodes.has(code) || unavailableStates.has(code) || /^08[0-9A-Z]{3}$/.test(code)) {
      return true;
    }
    if (stalePreparedStatement(code, err.message)) return true;
  }
  if (driverMessages.test(err.message)) return true;
  // pg-pool wraps a connect timeout; AggregateError carries each address's refusal.
  if (err instanceof AggregateError) return err.errors.some(isConnectionError);
  return err.cause !== undefined && err.cause !== err && isConnectionError(err.cause);
}

function isTimeout(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err instanceof DatabaseTimeoutError) return true;
  if ((err as { code?: unknown }).code === statementTimeoutState) return true;
  return /^(Query read timeout|timeout|Connection terminated due to connection timeout)/.test(
    err.message,
  );
}

export const databaseUnavailableReason = "DATABASE_UNAVAILABLE";

/**
 * Why a driver's error means the database is unavailable: it did not answer in time, or it
 * could not be reached (or a connection broke); undefined for any other error, and for one
 * already mapped (a DomainError), so that a failure is counted once (metrics).
 */
export function unavailableKind(err: unknown): "timeout" | "connection" | undefined {
  if (err instanceof DomainError) return undefined;
  if (isTimeout(err)) return "timeout";
  return isConnectionError(err) ? "connection" : undefined;
}

/** The error to throw: a DomainError `unavailable` for connection failures, err otherwise. */
export function asUnavailable(err: unknown): unknown {
  if (err instanceof DomainError) return err;
  const timedOut = isTimeout(err);
  if (!timedOut && !isConnectionError(err)) return err;
  return unavailable(
    databaseUnavailableReason,
    timedOut
      ? "the database did not answer in time; try again shortly"
      : "the database is not reachable at the moment; try again shortly",
    { cause: err, retryAfterSeconds: 1 },
  );
}

/** The same, for a promise. */
export function mapUnavailable<T>(work: Promise<T>): Promise<T> {
  return work.catch((err: unknown) => {
    throw asUnavailable(err);
  });
}
