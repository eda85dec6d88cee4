#!/usr/bin/env node
// A tiny operator plugin for Traitgate's operator lane: plain Node.js, no dependencies.
// It shows the contract from the plugin's side: accept calls only with the core's secret,
// answer JSON. Used by Traitgate's tests and benchmark as a real separate process.
//
//   CORE_SECRET=tgc_... PORT=8090 node examples/echo-plugin/server.mjs
//
// Operations (paths as in manifest.json):
//   POST /echo        -> {"echo": <payload>, "seen": {...}}
//   POST /slow        -> waits payload.ms (default 1000), then like /echo
//   POST /fail        -> answers payload.status (default 500) with {"error": payload.message}
//   POST /rag/index   -> {"ok": true, "doc_id": <payload.doc_id>, "chunks": <number of chunks>}
//   POST /rag/query   -> {"items": [...]}: payload.top_k items (default 5) of about
//                        payload.content_bytes characters each (default 1500)

import { createHash, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const secret = process.env.CORE_SECRET ?? "";
if (!secret.startsWith("tgc_")) {
  process.stderr.write("echo-plugin: set CORE_SECRET to the core secret printed at registration\n");
  process.exit(2);
}
const expected = createHash("sha256").update(`Bearer ${secret}`).digest();
const maxBody = 1 << 20;

function authorized(header) {
  const got = createHash("sha256")
    .update(String(header ?? ""))
    .digest();
  return timingSafeEqual(got, expected);
}

function send(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

const operations = {
  "/echo": async (payload, seen) => [200, { echo: payload, seen }],
  "/slow": async (payload, seen) => {
    await new Promise((r) => setTimeout(r, Number(payload.ms ?? 1000)));
    return [200, { echo: payload, seen }];
  },
  "/fail": async (payload) => [
    Number(payload.status ?? 500),
    { error: String(payload.message ?? "failed") },
  ],
  "/rag/index": async (payload) => [
    200,
    {
      ok: true,
      doc_id: String(payload.doc_id ?? ""),
      chunks: Array.isArray(payload.chunks) ? payload.chunks.length : 1,
    },
  ],
  "/rag/query": async (payload) => {
    const topK = Math.min(100, Number(payload.top_k ?? 5));
    const size = Math.min(65536, Number(payload.content_bytes ?? 1500));
    const content = "lorem ipsum dolor sit amet ".repeat(Math.ceil(size / 27)).slice(0, size);
    const items = Array.from({ length: topK }, (_, i) => ({
      id: `doc-${i}:0`,
      doc_id: `doc-${i}`,
      chunk_no: 0,
      title: `Document ${i}`,
      path: `/docs/${i}`,
      content,
      score: 1 - i / 100,
    }));
    return [200, { items }];
  },
};

const server = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/healthz") return send(res, 200, { ok: true });
  const operation = operations[req.url ?? ""];
  if (req.method !== "POST" || operation === undefined)
    return send(res, 404, { error: "no such operation" });
  if (!authorized(req.headers.authorization))
    return send(res, 401, { error: "core secret required" });
  const chunks = [];
  let size = 0;
  req.on("data", (chunk) => {
    size += chunk.length;
    if (size > maxBody) {
      send(res, 413, { error: "body too large" });
      req.destroy();
    } else chunks.push(chunk);
  });
  req.on("end", async () => {
    if (res.headersSent) return;
    let payload;
    try {
      payload = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return send(res, 400, { error: "body is not JSON" });
    }
    const seen = {
      request_id: req.headers["x-request-id"] ?? "",
      caller: req.headers["x-traitgate-caller"] ?? "",
      operation: req.headers["x-traitgate-operation"] ?? "",
      // Which headers came, never their values (the core's secret is one of them).
      header_names: Object.keys(req.headers).sort(),
    };
    try {
      const [status, body] = await operation(payload, seen);
      send(res, status, body);
    } catch {
      send(res, 500, { error: "echo-plugin failed" });
    }
  });
});

server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 8090), process.env.HOST ?? "127.0.0.1", () => {
  const { port } = server.address();
  // The test harness and the setup guide read this line.
  process.stdout.write(`echo-plugin listening on ${port}\n`);
});
for (const signal of ["SIGINT", "SIGTERM"])
  process.on(signal, () => server.close(() => process.exit(0)));
