import { DomainError } from "../errors.js";
import type { Logger } from "../log.js";
import type { HttpEmbedderConfig } from "./config.js";
import type { Embedder } from "./embedder.js";

export interface HttpEmbedderOptions extends HttpEmbedderConfig {
  dimension: number;
  log: Logger;
  /** Backoff base (default 250 ms, doubled per retry, with jitter); tests shorten it. */
  backoffMs?: number;
  /** Longest wait between attempts, Retry-After included (default 10 s). */
  maxBackoffMs?: number;
}

/** An attempt that may succeed if repeated (network, timeout, 408, 429, 5xx). */
class RetryableError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

const unavailable = (message: string, cause?: unknown) =>
  new DomainError("unavailable", "EMBEDDER_UNAVAILABLE", message, { cause });

/**
 * An OpenAI-compatible embeddings client (`POST …/embeddings {model, input: [...]}` →
 * `{data: [{index, embedding}]}`): texts go in batches of `batchSize`, one request after the
 * other; each attempt has its own timeout; network errors, timeouts, 408, 429 and 5xx are
 * retried with exponential backoff and jitter (Retry-After honoured up to `maxBackoffMs`).
 * The API key is only ever put in the Authorization header: never in a log line or an error.
 */
export function createHttpEmbedder(options: HttpEmbedderOptions): Embedder {
  const { model, apiKey, dimension, log, batchSize, maxRetries, timeoutMs } = options;
  /** A batch's reply: its vectors as JSON numbers (≤ 32 characters each) plus room. */
  const maxReplyBytes = 64 * 1024 + batchSize * dimension * 32;
  const endpoint = /\/embeddings\/?$/.test(options.url)
    ? options.url
    : `${options.url.replace(/\/+$/, "")}/embeddings`;
  const backoffMs = options.backoffMs ?? 250;
  const maxBackoffMs = options.maxBackoffMs ?? 10_000;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;

  async function attempt(input: readonly string[], signal?: AbortSignal): Promise<Float32Array[]> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
    let res: Response;
    try {
      res = await fetch(endpoint, {
        method: "POST",
        headers,
        body: JSON.stringify({
          model,
          input,
          encoding_format: "float",
          ...(options.sendDimensions ? { dimensions: dimension } : {}),
        }),
        signal: combined,
      });
    } catch (err) {
      if (signal?.aborted) throw err;
      throw new RetryableError(timeout.aborted ? `timed out after ${timeoutMs} ms` : "unreachable");
    }
    if (!res.ok) {
      await res.body?.cancel().catch(() => {});
      const status = res.status;
      if (status === 408 || status === 429 || status >= 500) {
        throw new RetryableError(`answered ${status}`, retryAfter(res.headers.get("retry-after")));
      }
      // 401/403/400…: repeating would not help. The body is not passed on (it may echo input).
      throw unavailable(`the embeddings endpoint refused the request (${status})`);
    }
    // A reply is at most a few vectors of floats: refuse to buffer more than this.
    const declared = Number(res.headers.get("content-length") ?? "0");
    if (declared > maxReplyBytes) {
      await res.body?.cancel().catch(() => {});
      throw unavailable(
        `the embeddings endpoint answered ${declared} bytes (at most ${maxReplyBytes})`,
      );
    }
    let body: unknown;
    try {
      const text = await res.text();
      if (text.length > maxReplyBytes) {
        throw unavailable(`the embeddings endpoint answered more than ${maxReplyBytes} bytes`);
      }
      body = JSON.parse(text);
    } catch (err) {
      if (err instanceof DomainError) throw err;
      throw new RetryableError("answered something other than JSON");
    }
    return parse(body, input.length);
  }

  function parse(body: unknown, count: number): Float32Array[] {
    const data = (body as { data?: unknown } | null)?.data;
    if (!Array.isArray(data) || data.length !== count) {
      throw unavailable(`the embeddings endpoint answered ${describe(data)} for ${count} texts`);
    }
    const out: Float32Array[] = new Array(count);
    data.forEach((item: { index?: unknown; embedding?: unknown }, position) => {
      const index = item?.index === undefined ? position : item.index;
      if (typeof index !== "number" || !Number.isInteger(index)) {
        throw unavailable("the embeddings endpoint answered a non-integer index");
      }
      const embedding = item?.embedding;
      if (!Array.isArray(embedding) || embedding.length !== dimension) {
        throw new DomainError(
          "failed_precondition",
          "EMBEDDING_DIMENSION",
          `the embeddings model returns ${Array.isArray(embedding) ? embedding.length : "no"} ` +
            `dimensions, EMBEDDING_DIM is ${dimension}`,
        );
      }
      if (index < 0 || index >= count || out[index] !== undefined) {
        throw unavailable("the embeddings endpoint answered inconsistent indexes");
      }
      const vector = Float32Array.from(embedding as number[]);
      // Non-numbers become NaN, and huge values Infinity: pgvector refuses both.
      if (!vector.every(Number.isFinite)) {
        throw unavailable("the embeddings endpoint answered values that are not finite numbers");
      }
      out[index] = vector;
    });
    return out;
  }

  async function batch(input: readonly string[], signal?: AbortSignal): Promise<Float32Array[]> {
    for (let retry = 0; ; retry++) {
      try {
        return await attempt(input, signal);
      } catch (err) {
        if (!(err instanceof RetryableError)) throw err;
        if (retry >= maxRetries) {
          throw unavailable(`the embeddings endpoint ${err.message} (${retry + 1} attempts)`);
        }
        const exponential = backoffMs * 2 ** retry * (0.5 + Math.random() / 2);
        const wait = Math.min(maxBackoffMs, Math.max(exponential, err.retryAfterMs ?? 0));
        log.warn(
          { attempt: retry + 1, waitMs: Math.round(wait), why: err.message },
          "embeddings retry",
        );
        await sleep(wait, signal);
      }
    }
  }

  return {
    name: `openai:${model}`,
    dimension,
    async embed(texts, signal) {
      const out: Float32Array[] = [];
      for (let start = 0; start < texts.length; start += batchSize) {
        out.push(...(await batch(texts.slice(start, start + batchSize), signal)));
      }
      return out;
    },
  };
}

function retryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function describe(data: unknown): string {
  return Array.isArray(data) ? `${data.length} embeddings` : "no embeddings";
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
