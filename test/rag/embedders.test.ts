import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DomainError } from "../../src/errors.js";
import { createLogger } from "../../src/log.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { norm } from "../../src/rag/embedder.js";
import { createHttpEmbedder } from "../../src/rag/http-embedder.js";
import { createLocalEmbedder } from "../../src/rag/local-embedder.js";
import { pgvectorAtLeast } from "../../src/rag/schema.js";
import { cosineDistance } from "./support.js";

describe("local hashing embedder", () => {
  const embedder = createLocalEmbedder({ dimension: 256 });

  it("is deterministic, normalised and of the configured dimension", async () => {
    const [a, b] = await embedder.embed(["Annual leave policy", "Annual leave policy"]);
    expect(a).toHaveLength(256);
    expect(Array.from(a ?? [])).toEqual(Array.from(b ?? []));
    expect(norm(a ?? [])).toBeCloseTo(1, 5);
  });

  it("puts texts sharing words nearer than unrelated ones", async () => {
    const [query, near, far] = await embedder.embed([
      "paracetamol dosage for adults",
      "The adult dosage of paracetamol is 1 g",
      "Employees accrue annual leave monthly",
    ]);
    if (!query || !near || !far) throw new Error("vectors");
    expect(cosineDistance(query, near)).toBeLessThan(cosineDistance(query, far) - 0.2);
  });

  it("gives a zero vector for text with nothing to embed", async () => {
    const [v] = await embedder.embed(["  !!! ... "]);
    expect(norm(v ?? [])).toBe(0);
  });
});

describe("OpenAI-compatible HTTP embedder", () => {
  const apiKey = "sk-test-very-secret-key";
  let server: Server;
  let base: string;
  /** What the fake server answers next (status, or a delay); default 200 with embeddings. */
  let script: (
    | { status: number; retryAfter?: string }
    | { delayMs: number }
    | { body: string }
    | "ok"
  )[] = [];
  const requests: { auth?: string; body: { model: string; input: string[] } }[] = [];

  beforeAll(async () => {
    server = createServer(async (req: IncomingMessage, res) => {
      let raw = "";
      for await (const chunk of req) raw += chunk;
      const body = JSON.parse(raw) as { model: string; input: string[] };
      requests.push({ auth: req.headers.authorization, body });
      const step = script.shift() ?? "ok";
      if (typeof step === "object" && "body" in step) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(step.body);
        return;
      }
      if (typeof step === "object" && "delayMs" in step) {
        await new Promise((r) => setTimeout(r, step.delayMs));
      } else if (typeof step === "object") {
        res.writeHead(step.status, step.retryAfter ? { "retry-after": step.retryAfter } : {});
        res.end(JSON.stringify({ error: { message: "nope" } }));
        return;
      }
      // Out of order on purpose: the client must place each by its index.
      const data = body.input
        .map((text, index) => ({ index, embedding: [text.length, 1, index + 1] }))
        .reverse();
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ data, model: body.model }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  function embedder(overrides: Partial<Parameters<typeof createHttpEmbedder>[0]> = {}) {
    const lines: string[] = [];
    const log = createLogger({
      level: "debug",
      destination: new Writable({
        write(chunk, _enc, done) {
          lines.push(String(chunk));
          done();
        },
      }),
    });
    const e = createHttpEmbedder({
      url: base,
      model: "test-model",
      apiKey,
      timeoutMs: 2000,
      maxRetries: 3,
      batchSize: 2,
      sendDimensions: false,
      dimension: 3,
      log,
      backoffMs: 5,
      ...overrides,
    });
    return { e, lines };
  }

  it("sends batches with the key and model, in order", async () => {
    requests.length = 0;
    script = [];
    const { e } = embedder();
    const out = await e.embed(["a", "bb", "ccc", "dddd", "eeeee"]);
    expect(out.map((v) => Array.from(v))).toEqual([
      [1, 1, 1],
      [2, 1, 2],
      [3, 1, 1],
      [4, 1, 2],
      [5, 1, 1],
    ]);
    expect(requests.map((r) => r.body.input)).toEqual([["a", "bb"], ["ccc", "dddd"], ["eeeee"]]);
    expect(
      requests.every((r) => r.auth === `Bearer ${apiKey}` && r.body.model === "test-model"),
    ).toBe(true);
    expect(e.name).toBe("openai:test-model");
  });

  it("retries 5xx, 429 and timeouts with backoff, and never logs the key", async () => {
    requests.length = 0;
    script = [{ status: 503 }, { status: 429, retryAfter: "0" }, { delayMs: 400 }, "ok"];
    const { e, lines } = embedder({ timeoutMs: 200 });
    const [v] = await e.embed(["x"]);
    expect(Array.from(v ?? [])).toEqual([1, 1, 1]);
    expect(requests).toHaveLength(4);
    expect(lines.filter((l) => l.includes("embeddings retry"))).toHaveLength(3);
    expect(lines.join("")).not.toContain(apiKey);
  });

  it("gives up after the retries: 503 EMBEDDER_UNAVAILABLE", async () => {
    script = [{ status: 500 }, { status: 500 }, { status: 500 }];
    const { e } = embedder({ maxRetries: 2 });
    const err = await e.embed(["x"]).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(DomainError);
    expect(err).toMatchObject({ kind: "unavailable", reason: "EMBEDDER_UNAVAILABLE" });
    expect(String((err as Error).message)).not.toContain(apiKey);
    script = [];
  });

  it("does not retry a refusal (401)", async () => {
    requests.length = 0;
    script = [{ status: 401 }];
    const { e } = embedder();
    await expect(e.embed(["x"])).rejects.toMatchObject({ reason: "EMBEDDER_UNAVAILABLE" });
    expect(requests).toHaveLength(1);
  });

  it("refuses replies with values that are not finite numbers, or too large to hold", async () => {
    script = [{ body: '{"data":[{"index":0,"embedding":[1e999,1,1]}]}' }];
    await expect(embedder().e.embed(["x"])).rejects.toMatchObject({
      reason: "EMBEDDER_UNAVAILABLE",
    });
    script = [{ body: '{"data":[{"index":0.5,"embedding":[1,1,1]}]}' }];
    await expect(embedder().e.embed(["x"])).rejects.toMatchObject({
      reason: "EMBEDDER_UNAVAILABLE",
    });
    // Valid but for its size: only the bound refuses it.
    script = [
      {
        body: JSON.stringify({
          data: [{ index: 0, embedding: [1, 1, 1] }],
          padding: "x".repeat(2_000_000),
        }),
      },
    ];
    await expect(embedder().e.embed(["x"])).rejects.toMatchObject({
      reason: "EMBEDDER_UNAVAILABLE",
    });
    script = [];
  });

  it("refuses embeddings of another dimension", async () => {
    script = [];
    const { e } = embedder({ dimension: 4 });
    await expect(e.embed(["x"])).rejects.toMatchObject({ reason: "EMBEDDING_DIMENSION" });
  });
});

describe("embeddings configuration", () => {
  const base = { CORE_SECRET: `tgc_${"s".repeat(43)}`, EMBEDDINGS_MODEL: "m" };
  it("refuses sending an API key over plain http to another machine", () => {
    expect(() =>
      loadRagConfig({
        ...base,
        EMBEDDINGS_URL: "http://embed.example/v1",
        EMBEDDINGS_API_KEY: "k",
      }),
    ).toThrow(/https/);
    expect(
      loadRagConfig({
        ...base,
        EMBEDDINGS_URL: "http://127.0.0.1:9000/v1",
        EMBEDDINGS_API_KEY: "k",
      }).embeddings?.url,
    ).toBe("http://127.0.0.1:9000/v1");
    expect(
      loadRagConfig({
        ...base,
        EMBEDDINGS_URL: "https://embed.example/v1",
        EMBEDDINGS_API_KEY: "k",
      }).embeddings?.url,
    ).toBe("https://embed.example/v1");
  });
});

describe("pgvector version check", () => {
  it.each([
    ["0.8.0", true],
    ["0.8.1", true],
    ["1.0.0", true],
    ["0.7.4", false],
    ["0.5", false],
    ["", false],
  ])("%s → %s", (version, ok) => {
    expect(pgvectorAtLeast(version, 0, 8)).toBe(ok);
  });
});
