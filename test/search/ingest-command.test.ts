import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runIngestCommand } from "../../src/search/ingest-command.js";

/**
 * `traitgate ingest` in process, with the core faked by a fetch that records each request:
 * what it sends (paths under a source prefix, the access-change flag) and what it says.
 */

const root = mkdtempSync(join(tmpdir(), "traitgate-ingest-cmd-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function folder(name: string, files: Record<string, string>): string {
  const dir = join(root, name);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

interface Sent {
  documents: { path: string }[];
  allow_access_change?: boolean;
}

async function run(args: string[], answer?: { status: number; body: unknown }) {
  const sent: Sent[] = [];
  let err = "";
  let out = "";
  const code = await runIngestCommand(args, {
    env: { TRAITGATE_TOKEN: "token", TRAITGATE_URL: "http://core.test" },
    err: { write: (t: string) => (err += t) },
    out: { write: (t: string) => (out += t) },
    fetch: (async (_url: string, init: RequestInit) => {
      const body = JSON.parse(String(init.body)) as Sent;
      sent.push(body);
      const reply = answer ?? {
        status: 200,
        body: {
          documents: body.documents.map((d) => ({ path: d.path, chunks: 1, skipped: false })),
        },
      };
      return new Response(JSON.stringify(reply.body), { status: reply.status });
    }) as typeof fetch,
  });
  return { code, sent, err, out };
}

const access = ["--required-traits", "none", "--classification", "public"];

describe("traitgate ingest", () => {
  it("sends paths under the folder's name, so that two folders' files are two documents", async () => {
    const ward = folder("ward", { "notes.md": "ward", "sub/x.txt": "x" });
    const lobby = folder("lobby", { "notes.md": "lobby" });
    const first = await run([ward, ...access]);
    const second = await run([`${lobby}/`, ...access]);
    expect(first.code).toBe(0);
    expect(first.sent[0]?.documents.map((d) => d.path)).toEqual([
      "ward/notes.md",
      "ward/sub/x.txt",
    ]);
    expect(second.sent[0]?.documents.map((d) => d.path)).toEqual(["lobby/notes.md"]);
    expect(first.sent[0]?.allow_access_change).toBeUndefined();
  });

  it("takes another source name, or none, and refuses one that is not a path segment", async () => {
    const dir = folder("src-override", { "notes.md": "n" });
    expect((await run([dir, "--source", "wiki", ...access])).sent[0]?.documents[0]?.path).toBe(
      "wiki/notes.md",
    );
    expect((await run([dir, "--source", "", ...access])).sent[0]?.documents[0]?.path).toBe(
      "notes.md",
    );
    for (const bad of ["a/b", "..", ".", "x\\y"]) {
      const result = await run([dir, "--source", bad, ...access]);
      expect([result.code, result.sent.length]).toEqual([2, 0]);
      expect(result.err).toContain("--source");
    }
  });

  it("asks for an access change only when told, and says how when the core refuses one", async () => {
    const dir = folder("access", { "notes.md": "n" });
    const allowed = await run([dir, ...access, "--allow-access-change"]);
    expect(allowed.sent[0]?.allow_access_change).toBe(true);
    const refused = await run([dir, ...access], {
      status: 409,
      body: {
        code: "already_exists",
        message: "documents[0] (access/notes.md) is already indexed with other required traits",
        details: [{ reason: "DOCUMENT_ACCESS_CHANGE" }],
      },
    });
    expect(refused.code).toBe(1);
    expect(refused.err).toContain("409 DOCUMENT_ACCESS_CHANGE");
    expect(refused.err).toContain("--allow-access-change");
  });

  it("keeps up to --concurrency requests in flight, and sends no new batch after a failure", async () => {
    const files: Record<string, string> = {};
    for (let i = 0; i < 200; i++) files[`f${String(i).padStart(3, "0")}.md`] = `file ${i}`;
    const dir = folder("many", files);
    // Answers are held until `hold` requests wait (or the last one came): no timing involved.
    const ingestWith = async (flags: string[], hold: number, failOn?: number) => {
      let inFlight = 0;
      let most = 0;
      let requests = 0;
      let waiting: (() => void)[] = [];
      let err = "";
      let out = "";
      const code = await runIngestCommand([dir, ...access, ...flags], {
        env: { TRAITGATE_TOKEN: "token", TRAITGATE_URL: "http://core.test" },
        err: { write: (t: string) => (err += t) },
        out: { write: (t: string) => (out += t) },
        fetch: (async (_url: string, init: RequestInit) => {
          const n = requests++;
          inFlight++;
          most = Math.max(most, inFlight);
          await new Promise<void>((r) => {
            waiting.push(r);
            if (waiting.length >= hold || requests === 10) {
              for (const release of waiting) release();
              waiting = [];
            }
          });
          inFlight--;
          const body = JSON.parse(String(init.body)) as Sent;
          if (n === failOn) return new Response(JSON.stringify({ message: "no" }), { status: 500 });
          return new Response(
            JSON.stringify({
              documents: body.documents.map((d) => ({ path: d.path, chunks: 1, skipped: false })),
            }),
          );
        }) as typeof fetch,
      });
      return { code, most, requests, err, out };
    };
    // 200 files, 20 a batch: 10 requests.
    const parallel = await ingestWith(["--concurrency", "3"], 3);
    expect([parallel.code, parallel.requests, parallel.most]).toEqual([0, 10, 3]);
    expect(JSON.parse(parallel.out)).toMatchObject({ files: 200, indexed: 200, chunks: 200 });
    const serial = await ingestWith(["--concurrency", "1"], 1);
    expect([serial.code, serial.most]).toEqual([0, 1]);
    // The second request fails: the one in flight beside it finishes, no other is sent.
    const failed = await ingestWith(["--concurrency", "2"], 2, 1);
    expect(failed.code).toBe(1);
    expect(failed.requests).toBe(2);
    expect(failed.err).toContain("500");
    expect((await ingestWith(["--concurrency", "0"], 1)).code).toBe(2);
  });
});
