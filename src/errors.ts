/**
 * Typed errors of the domain. The domain never sees transport types: it throws
 * these, and the server's error boundary (src/server/error-boundary.ts) maps
 * them to Connect codes, which the transports map to HTTP statuses.
 *
 * Every error carries a stable machine `reason` (UPPER_SNAKE_CASE) that
 * clients and tests can rely on; messages are for humans and may change.
 */
export type ErrorKind =
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "already_exists"
  | "aborted"
  | "failed_precondition"
  | "resource_exhausted"
  | "unavailable"
  | "deadline_exceeded"
  | "internal";

export interface DomainErrorOptions {
  cause?: unknown;
  /** The request field the error is about, e.g. "username". */
  field?: string;
  /** Extra machine-readable context; never secrets or personal data. */
  metadata?: Record<string, string>;
  /** For throttling errors: when the client may try again (sent as Retry-After). */
  retryAfterSeconds?: number;
  /**
   * A JSON object for the client, sent as a `google.protobuf.Struct` error detail
   * (e.g. a plugin's own error body). Never secrets, and never logged (see `body`).
   */
  body?: Record<string, unknown>;
}

export class DomainError extends Error {
  override readonly name = "DomainError";
  readonly field: string | undefined;
  readonly metadata: Record<string, string>;
  readonly retryAfterSeconds: number | undefined;
  /**
   * Not enumerable: serializers (pino's `err`, JSON.stringify, util.inspect's default)
   * never see it, so a logged error cannot carry what a plugin answered.
   */
  declare readonly body: Record<string, unknown> | undefined;

  constructor(
    readonly kind: ErrorKind,
    readonly reason: string,
    message: string,
    options: DomainErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.field = options.field;
    this.metadata = options.metadata ?? {};
    this.retryAfterSeconds = options.retryAfterSeconds;
    Object.defineProperty(this, "body", { value: options.body, enumerable: false });
  }
}

export const invalidArgument = (
  reason: string,
  message: string,
  options?: DomainErrorOptions,
): DomainError => new DomainError("invalid_argument", reason, message, options);

export const unauthenticated = (
  reason: string,
  message: string,
  options?: DomainErrorOptions,
): DomainError => new DomainError("unauthenticated", reason, message, options);

export const permissionDenied = (
  reason: string,
  message: string,
  options?: DomainErrorOptions,
): DomainError => new DomainError("permission_denied", reason, message, options);

export const unavailable = (
  reason: string,
  message: string,
  options?: DomainErrorOptions,
): DomainError => new DomainError("unavailable", reason, message, options);
