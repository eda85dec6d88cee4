import type { ServerHttp2Session } from "node:http2";

/**
 * Closes an HTTP/2 session (GOAWAY, then the connection) once it has had no open
 * stream for `idleMs`. Idle means no call in progress, whatever else the client
 * sends: PING frames do not keep a session alive, a long server-streaming call
 * does. A client that wants to call again opens a new connection, as gRPC and
 * Connect clients do on GOAWAY.
 *
 * One timer per session, re-armed (`refresh`) when its last stream ends, so a
 * busy session costs no timer per call.
 */
export function closeWhenIdle(session: ServerHttp2Session, idleMs: number): void {
  let open = 0;
  const timer = setTimeout(() => {
    if (open === 0 && !session.closed && !session.destroyed) session.close();
  }, idleMs);
  timer.unref();
  session.on("stream", (stream) => {
    open++;
    stream.once("close", () => {
      open--;
      if (open === 0) timer.refresh();
    });
  });
  session.once("close", () => clearTimeout(timer));
}
