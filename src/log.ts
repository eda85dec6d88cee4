import { type DestinationStream, type Logger, pino } from "pino";

/**
 * Keys whose values never reach a log line, wherever they appear (top level or
 * one object deep). Handlers also never log request bodies, so this list is
 * the second line of defence, not the first.
 */
const sensitiveKeys = [
  "authorization",
  "password",
  "newPassword",
  "new_password",
  "token",
  "accessToken",
  "access_token",
  "refreshToken",
  "refresh_token",
  "totp_code",
  "totpCode",
  "code",
  "secret",
  "apiKey",
  "api_key",
  "x-api-key",
  "payload",
  "content",
  "cookie",
  "set-cookie",
];

export const redactPaths = [
  ...sensitiveKeys,
  ...sensitiveKeys.map((k) => `*.${k}`),
  ...sensitiveKeys.map((k) => `*.headers.${k}`),
  ...sensitiveKeys.map((k) => `*.*.${k}`),
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
