import { Agent, createServer, request } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * The gateway benchmark's reference floor: the least a Node.js HTTP/1.1 reverse proxy can
 * do — read the request, forward its bytes over a keep-alive pool, copy the answer back.
 * No authentication, allowlist, policy, audit, JSON or protobuf. Whatever this costs on the
 * machine, every gateway written on Node's HTTP server and client costs at least as much;
 * the rows it adds separate Node's own HTTP cost from the Traitgate gateway's work.
 *
 *   UPSTREAM_PORT=NNNN PORT=0 node dist/bench/node-proxy.js   → "node-proxy listening on N"
 */

const upstreamPort = Number(process.env.UPSTREAM_PORT);
if (!Number.isInteger(upstreamPort) || upstreamPort <= 0) {
  process.stderr.write("node-proxy: set UPSTREAM_PORT\n");
  process.exit(2);
}
const agent = new Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64 });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const headers: Record<string, string> = {
      "content-type": req.headers["content-type"] ?? "application/json",
      "content-length": String(body.length),
    };
    if (req.headers.authorization) headers.authorization = req.headers.authorization;
    const upstream = request(
      { agent, host: "127.0.0.1", port: upstreamPort, method: req.method, path: req.url, headers },
      (reply) => {
        const answer: Buffer[] = [];
        reply.on("data", (chunk: Buffer) => answer.push(chunk));
        reply.on("end", () => {
          const out = Buffer.concat(answer);
          res.writeHead(reply.statusCode ?? 502, {
            "content-type": reply.headers["content-type"] ?? "application/json",
            "content-length": out.length,
          });
          res.end(out);
        });
      },
    );
    upstream.on("error", () => {
      res.writeHead(502).end();
    });
    upstream.end(body);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  process.stderr.write(`node-proxy listening on ${(server.address() as AddressInfo).port}\n`);
});
process.on("SIGTERM", () => {
  server.close();
  agent.destroy();
  process.exit(0);
});
