import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy in front of a database, on a fixed local port, that a test can stop (the port
 * refuses connections and open ones are cut), turn into a black hole (connections are
 * accepted and never answered) and start again.
 */
export interface TcpProxy {
  port: number;
  /** Cuts every connection and closes the port. */
  stop(): Promise<void>;
  /** Accepts connections again on the same port; `blackHole` never forwards them. */
  start(options?: { blackHole?: boolean }): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;

  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => sockets.delete(socket));
  };

  async function start(options: { blackHole?: boolean } = {}): Promise<void> {
    const s = createServer((client) => {
      track(client);
      if (options.blackHole) return;
      const upstream = connect(targetPort, targetHost);
      track(upstream);
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      s.once("error", reject);
      s.listen(port, "127.0.0.1", () => resolve());
    });
    const address = s.address();
    port = typeof address === "object" && address ? address.port : port;
    server = s;
  }

  async function stop(): Promise<void> {
    const s = server;
    server = undefined;
    for (const socket of sockets) socket.destroy();
    sockets.clear();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  await start();
  return {
    get port() {
      return port;
    },
    stop,
    start,
    close: stop,
  };
}
