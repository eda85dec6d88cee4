import { type DestinationStream, type Logger, pino } from "pino";

/**
 * Request and response data that never reaches a log line: fields that hold credentials or
 * what callers and plugins send (passwords, tokens, codes, secrets, payloads, replies,
 * document text, query text), whole bodies, and the row values PostgreSQL puts in an
 * error's `detail`. A one-time code in a body goes with the body; as a field of its own it
 * is `totp_code` or `recovery_code`.
 *
 * Redacted by path: at the top of a log object and inside the objects that carry request
 * data or errors (`containers`), never by a key's name wherever it is, so that one-word
 * names of outcomes stay (`code`: the gRPC code of the access line, an error's errno). Exact
 * paths also keep redaction cheap: a leading wildcard (`*.password`) made pino walk every
 * field of every line, ~30× the cost of a line without redaction; exact paths cost nothing
 * on a line without those objects. Handlers never log requests, so this is the second line
 * of defence, not the first.
 */
const requestData = [
  // credentials
  "authorization",
  "cookie",
  "set-cookie",
  "x-api-key",
  "password",
  "newPassword",
  "new_password",
  "currentPassword",
  "current_password",
  "token",
  "accessToken",
  "access_token",
  "refreshToken",
  "refresh_token",
  "totpCode",
  "totp_code",
  "recoveryCode",
  "recovery_code",
  "recoveryCodes",
  "recovery_codes",
  "otpauthUri",
  "otpauth_uri",
  "secret",
  "clientSecret",
  "client_secret",
  "coreSecret",
  "core_secret",
  "credential",
  "apiKey",
  "api_key",
  // what callers and plugins send
  "body",
  "payload",
  "reply",
  "content",
  "q",
  // PostgreSQL's error detail quotes row values (`Key (username)=(...)`)
  "detail",
];

/** Objects of a log line in which request data or error data may sit. */
const containers = [
  "req",
  "req.headers",
  "request",
  "headers",
  "res",
  "res.headers",
  "err",
  "err.cause",
  "error",
  "message",
];

const member = (key: string) => (/^[A-Za-z_]\w*$/.test(key) ? `.${key}` : `["${key}"]`);

export const redactPaths = [
  ...requestData,
  ...containers.flatMap((c) => requestData.map((k) => `${c}${member(k)}`)),
];

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

export interface LoggerOptions {
  level: LogLevel;
  /** Where lines go; stdout by default. Tests pass a capturing stream. */
  destination?: DestinationStream;
}

export function createLogger(options: LoggerOptions): Logger {
  return pino(
    {
      level: options.level,
      base: { service: "traitgate" },
      redact: { paths: redactPaths, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination,
  );
}

export const silentLogger: Logger = pino({ level: "silent" });

export type { Logger };
