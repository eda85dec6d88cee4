import type { Logger } from "../log.js";

/**
 * The process's last line of defence against one connection's failure. Node stops the
 * process on an `error` event nobody listens to; when that error is only one connection's
 * (its peer reset it, a pipe broke, an HTTP/2 stream was cancelled), stopping every other
 * caller's calls with it is the wrong answer. Every such case is a bug (a missing listener),
 * fixed where it is found (test/integration/connection-resets.test.ts looks for them); this
 * guard keeps one that slipped through from becoming a denial of service: it logs and counts
 * it, and the process serves on.
 *
 * Anything else is a programming error, and the process still stops on it, as it would
 * without the guard (the error is thrown again once the guard is out of the way: Node
 * prints it and exits with status 1).
 *
 * Installed by `traitgate serve` and `traitgate demo` only; test processes do not install
 * it, so there an uncaught error of any kind fails the run.
 */

/** Codes of errors that concern one connection or stream and leave the process sound. */
const perConnectionCodes = new Set([
  // The peer went away or never answered.
  "ECONNRESET",
  "ECONNABORTED",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  // A stream (socket, request, response) closed or destroyed under a reader or writer.
  "ERR_STREAM_PREMATURE_CLOSE",
  "ERR_STREAM_DESTROYED",
  "ERR_SOCKET_CLOSED",
  // HTTP/2: the peer reset or cancelled a stream, or its session ended or broke the protocol.
  // (Other ERR_HTTP2_* codes, such as headers sent twice or an invalid header, are
  // programming errors and stop the process.)
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_HTTP2_PING_CANCEL",
  "ERR_HTTP2_SETTINGS_CANCEL",
  "ERR_HTTP2_ERROR",
]);

export function isPerConnectionError(err: unknown): err is NodeJS.ErrnoException {
  if (!(err instanceof Error)) return false;
  const code = (err as NodeJS.ErrnoException).code;
  return typeof code === "string" && perConnectionCodes.has(code);
}

export interface LastResortGuard {
  /** Per-connection errors that reached the process since the guard was installed. */
  caught(): number;
  uninstall(): void;
}

/** Where the guard listens; the process, or a stand-in in unit tests. */
type ProcessEvents = Pick<NodeJS.Process, "on" | "off">;

export function installLastResortGuard(
  log: Logger,
  target: ProcessEvents = process,
): LastResortGuard {
  let caught = 0;
  const onUncaught = (err: unknown, origin: string) => {
    if (!isPerConnectionError(err)) {
      target.off("uncaughtException", onUncaught);
      log.error({ origin }, "uncaught exception: stopping the process");
      // Thrown again outside this listener, so that Node handles it as if the guard were
      // not there: the error and its stack on stderr, exit status 1.
      process.nextTick(() => {
        throw err;
      });
      return;
    }
    caught++;
    // No message, no request data: the code, where it came from, and the code path that
    // left the error without a listener (the stack's frames, which name functions only).
    log.warn(
      {
        error_code: err.code,
        syscall: err.syscall,
        origin,
        caught_total: caught,
        frames: (err.stack ?? "")
          .split("\n")
          .slice(1, 9)
          .map((l) => l.trim()),
      },
      "a connection's error reached the process (no listener for it): the process serves on",
    );
  };
  target.on("uncaughtException", onUncaught);
  return {
    caught: () => caught,
    uninstall: () => target.off("uncaughtException", onUncaught),
  };
}
