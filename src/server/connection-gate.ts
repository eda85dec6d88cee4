import type { Server, Socket } from "node:net";
import type { Logger } from "../log.js";
import type { ConnectionLimits } from "./limits.js";

/**
 * The connection caps of one listening server. The total is Node's own
 * `maxConnections` (a connection beyond it is closed before a socket is even
 * made for it); the cap per client address is checked here when a connection
 * is accepted, before any byte of it is read. A refused connection is closed at
 * once (the client sees the connection end before any answer, which HTTP
 * clients treat as a failed connection, not a failed request), counted, and
 * logged at most once per `logEveryMs` (a client opening connections in a loop
 * must not flood the log).
 */

export interface ConnectionGate {
  /** Connections closed by a cap since the server started. */
  refused(): number;
}

/** IPv4 clients of a dual-stack socket show as `::ffff:a.b.c.d`; one client, one key. */
const addressKey = (address: string): string =>
  address.startsWith("::ffff:") ? address.slice(7) : address;

export function guardConnections(
  server: Server,
  limits: ConnectionLimits,
  log: Logger | undefined,
  logEveryMs = 10_000,
): ConnectionGate {
  const perAddress = new Map<string, number>();
  let refused = 0;
  let unlogged = 0;
  let loggedAt = Number.NEGATIVE_INFINITY;

  const refuse = (reason: "total" | "per_address", address: string | undefined) => {
    refused++;
    unlogged++;
    const now = performance.now();
    if (now - loggedAt < logEveryMs) return;
    loggedAt = now;
    log?.warn(
      {
        reason,
        client_address: address,
        refused_since_last_line: unlogged,
        refused_total: refused,
      },
      "connection refused: too many open connections",
    );
    unlogged = 0;
  };

  server.maxConnections = limits.max;
  server.on("drop", (data?: { remoteAddress?: string }) => refuse("total", data?.remoteAddress));

  // Before the server's own listener (TLS wraps the socket there): a refused socket is
  // never handed to HTTP or TLS.
  server.prependListener("connection", (socket: Socket) => {
    if (limits.maxPerAddress === 0) return;
    const address = socket.remoteAddress;
    if (address === undefined) {
      // Already gone: nothing to count, nothing to serve.
      socket.destroy();
      return;
    }
    const key = addressKey(address);
    const count = perAddress.get(key) ?? 0;
    if (count >= limits.maxPerAddress) {
      refuse("per_address", key);
      socket.destroy();
      return;
    }
    perAddress.set(key, count + 1);
    socket.once("close", () => {
      const left = (perAddress.get(key) ?? 1) - 1;
      if (left === 0) perAddress.delete(key);
      else perAddress.set(key, left);
    });
  });

  return { refused: () => refused };
}
