import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * An operator plugin in the test process, for tests that need to know where a
 * gateway call is: `/hold` keeps each call until the test releases it (and says
 * when the core gave up on it), `/big` answers with `bigReplyBytes` of JSON,
 * anything else answers `{"ok": true}` at once. It checks no secret: what it
 * serves is the core's side of the hop, not the plugin contract (the echo plugin
 * in examples/ covers that).
 */

export interface HeldCall {
  /** Resolves when the core closed the hop's request (it gave up on the call). */
  closed: Promise<void>;
  release(): void;
}

export interface HeldPlugin {
  port: number;
  /** Calls of `/hold` as they arrive, oldest first; shift() them to take one. */
  held: HeldCall[];
  /** Resolves with the next call of `/hold` (one already waiting, or the next to come). */
  nextHeld(): Promise<HeldCall>;
  /** Calls received, by path. */
  received: Map<string, number>;
  close(): Promise<void>;
}

export async function startHeldPlugin(bigReplyBytes = 512 * 1024): Promise<HeldPlugin> {
  const held: HeldCall[] = [];
  const waiting: Array<(call: HeldCall) => void> = [];
  const received = new Map<string, number>();
  const item = "x".repeat(1000);
  const big = JSON.stringify({
    items: Array.from({ length: Math.ceil(bigReplyBytes / 1010) }, () => item),
  });

  const server: Server = createServer((req: IncomingMessage, res) => {
    const path = req.url ?? "/";
    received.set(path, (received.get(path) ?? 0) + 1);
    req.resume();
    req.once("end", () => {
      if (path === "/hold") {
        const call: HeldCall = {
          closed: new Promise((resolve) => res.once("close", () => resolve())),
          release: () => {
            if (!res.writableEnded && !res.destroyed) res.end('{"ok":true}');
          },
        };
        const taker = waiting.shift();
        if (taker) taker(call);
        else held.push(call);
        return;
      }
      res.setHeader("content-type", "application/json");
      res.end(path === "/big" ? big : '{"ok":true}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    held,
    received,
    nextHeld: () => {
      const call = held.shift();
      if (call) return Promise.resolve(call);
      return new Promise((resolve) => waiting.push(resolve));
    },
    async close() {
      for (const call of held.splice(0)) call.release();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
