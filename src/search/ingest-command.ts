import { readdir, readFile, stat } from "node:fs/promises";
import { basename, join, relative, resolve, sep } from "node:path";
import { parseArgs } from "node:util";

/**
 * `traitgate ingest <dir>`: sends the .md, .txt and .html files under a folder to a running
 * core (`POST /api/rag/ingest`) in batches, with their required traits and classification,
 * showing progress (files, chunks, chunks/s, ETA) on standard error, with up to four requests
 * in flight (`--concurrency`). Paths are sent relative
 * to the folder under a source prefix (`--source`, default the folder's name), never as this
 * machine's absolute paths: a path is a document's identity, so two folders' notes.md stay two
 * documents. The core skips unchanged files, and refuses to change who may read a document it
 * already holds unless `--allow-access-change` is given.
 */

export interface IngestCommandIo {
  env: NodeJS.ProcessEnv;
  /** Progress and messages. */
  err: { write(text: string): unknown; isTTY?: boolean };
  /** The summary (one JSON line). */
  out: { write(text: string): unknown };
  fetch?: typeof fetch;
}

const extensions = /\.(md|markdown|txt|html?)$/i;
/** Files and bytes per request: well under the core's MAX_BODY_BYTES default of 1 MiB. */
const batchFiles = 20;
const batchBytes = 512 * 1024;
/** Requests in flight (--concurrency): enough to keep the core and the backend both busy. */
const defaultConcurrency = 4;

/** The .md, .txt and .html files under `root`, in a stable order, skipping dot-files. */
export async function filesUnder(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string) => {
    const entries = await readdir(dir, { withFileTypes: true });
    entries.sort((a, b) => a.name.localeCompare(b.name));
    for (const entry of entries) {
      if (entry.name.startsWith(".")) continue;
      const full = join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else if (entry.isFile() && extensions.test(entry.name)) out.push(full);
    }
  };
  await walk(root);
  return out;
}

const usage =
  "usage: traitgate ingest <dir> --required-traits T,T|none --classification C [--url URL]\n" +
  "         [--source NAME] [--allow-access-change] [--concurrency N]\n" +
  "  paths are sent as NAME/<path in dir> (default NAME: the folder's name; --source '' for none)\n" +
  "  the access token of a user whose roles include capability:ingest comes from TRAITGATE_TOKEN";

/** Returns the exit code: 0 done, 1 a request failed, 2 bad usage. */
export async function runIngestCommand(args: string[], io: IngestCommandIo): Promise<number> {
  let parsed: ReturnType<typeof parseIngestArgs>;
  try {
    parsed = parseIngestArgs(args, io.env);
  } catch (err) {
    io.err.write(`traitgate ingest: ${(err as Error).message}\n${usage}\n`);
    return 2;
  }
  const {
    root,
    requiredTraits,
    classification,
    url,
    token,
    source,
    allowAccessChange,
    concurrency,
  } = parsed;
  if (!(await stat(root).catch(() => undefined))?.isDirectory()) {
    io.err.write(`traitgate ingest: ${root} is not a folder\n`);
    return 2;
  }
  const files = await filesUnder(root);
  if (files.length === 0) {
    io.err.write(`traitgate ingest: no .md, .txt or .html files under ${root}\n`);
    return 2;
  }
  const doFetch = io.fetch ?? fetch;
  const started = performance.now();
  let done = 0;
  let chunks = 0;
  let skipped = 0;
  const progress = (final = false) => {
    const seconds = (performance.now() - started) / 1000;
    const rate = seconds > 0 ? chunks / seconds : 0;
    const eta = done > 0 ? (seconds / done) * (files.length - done) : 0;
    const line =
      `files ${done}/${files.length}  chunks ${chunks}  ${rate.toFixed(1)} chunks/s` +
      `  skipped ${skipped}  ETA ${final ? "0" : eta.toFixed(0)} s`;
    io.err.write(io.err.isTTY ? `\r${line}${final ? "\n" : ""}` : `${line}\n`);
  };
  // Batches go out with up to `concurrency` requests in flight: the core and the backend then
  // work at the same time (one request at a time leaves each idle while the other works).
  // After a failure no new batch is sent; those already in flight finish.
  const inFlight = new Set<Promise<void>>();
  let failed = false;
  const send = async (batch: { path: string; content: string }[]): Promise<boolean> => {
    const res = await doFetch(`${url}/api/rag/ingest`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({
        documents: batch.map((f) => ({
          path: f.path,
          content: f.content,
          required_traits: requiredTraits,
          classification,
        })),
        ...(allowAccessChange ? { allow_access_change: true } : {}),
      }),
    }).catch((err: unknown) => err as Error);
    if (res instanceof Error) {
      io.err.write(`\ntraitgate ingest: ${url} cannot be reached (${res.message})\n`);
      return false;
    }
    const body = (await res.json().catch(() => ({}))) as {
      documents?: { chunks: number; skipped: boolean }[];
      message?: string;
      details?: { reason?: string }[];
    };
    if (!res.ok) {
      const reason = body.details?.find((d) => typeof d.reason === "string")?.reason;
      io.err.write(
        `\ntraitgate ingest: the core answered ${res.status}${reason ? ` ${reason}` : ""}: ${body.message ?? ""}\n`,
      );
      if (reason === "DOCUMENT_ACCESS_CHANGE") {
        io.err.write(
          "  nothing of this batch was indexed; to change who may read it, run again with " +
            "--allow-access-change (or use another --source for different documents)\n",
        );
      }
      return false;
    }
    for (const d of body.documents ?? []) {
      done++;
      if (d.skipped) skipped++;
      else chunks += d.chunks;
    }
    progress();
    return true;
  };
  const flush = async (batch: { path: string; content: string }[]) => {
    if (batch.length === 0 || failed) return;
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    if (failed) return;
    const request: Promise<void> = send(batch).then((ok) => {
      if (!ok) failed = true;
      inFlight.delete(request);
    });
    inFlight.add(request);
  };
  let batch: { path: string; content: string }[] = [];
  let bytes = 0;
  for (const file of files) {
    if (failed) break;
    const content = await readFile(file, "utf8");
    const inFolder = relative(root, file).split(sep).join("/");
    const path = source === "" ? inFolder : `${source}/${inFolder}`;
    if (batch.length >= batchFiles || (bytes + content.length > batchBytes && batch.length > 0)) {
      await flush(batch);
      batch = [];
      bytes = 0;
    }
    batch.push({ path, content });
    bytes += content.length;
  }
  await flush(batch);
  await Promise.all(inFlight);
  if (failed) return 1;
  progress(true);
  io.out.write(
    `${JSON.stringify({ files: files.length, indexed: done - skipped, skipped, chunks })}\n`,
  );
  return 0;
}

function parseIngestArgs(args: string[], env: NodeJS.ProcessEnv) {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      "required-traits": { type: "string" },
      classification: { type: "string" },
      url: { type: "string" },
      source: { type: "string" },
      "allow-access-change": { type: "boolean", default: false },
      concurrency: { type: "string" },
    },
    strict: true,
  });
  const root = positionals[0];
  if (root === undefined || positionals.length > 1) throw new Error("name one folder");
  // The source names the documents of this folder apart from other folders' (ids are paths).
  const source = values.source ?? basename(resolve(root));
  if (values.source === undefined && source === "") {
    throw new Error("the folder has no name to use as the source: say one with --source NAME");
  }
  if (source !== "" && (/[/\\]/.test(source) || source === "." || source === "..")) {
    throw new Error(`--source must be one path segment, without / or \\ (got "${source}")`);
  }
  const token = env.TRAITGATE_TOKEN?.trim();
  if (!token) throw new Error("set TRAITGATE_TOKEN to an access token (POST /auth/login)");
  const url = (values.url ?? env.TRAITGATE_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
  // Both are said explicitly: nothing is made readable by default.
  const traits = values["required-traits"];
  if (traits === undefined) {
    throw new Error("say which traits a reader needs: --required-traits T,T (or none)");
  }
  if (values.classification === undefined) {
    throw new Error("say how the documents are classified: --classification C (e.g. internal)");
  }
  const requiredTraits =
    traits.trim() === "none"
      ? []
      : traits
          .split(",")
          .map((t) => t.trim())
          .filter((t) => t !== "");
  const concurrency = Number(values.concurrency ?? defaultConcurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 16) {
    throw new Error("--concurrency must be a whole number from 1 to 16");
  }
  return {
    concurrency,
    root,
    requiredTraits,
    classification: values.classification,
    url,
    token,
    source,
    allowAccessChange: values["allow-access-change"],
  };
}
