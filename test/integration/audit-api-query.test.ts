import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type AuditWriter,
  createAuditQuery,
  createAuditWriter,
  parseAuditExportArgs,
  runAuditExport,
} from "../../src/audit/index.js";
import { DomainError } from "../../src/errors.js";
import { silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";

/** Reading the audit log (filters, keyset pages, the JSONL export) on PGlite and PostgreSQL. */

const t0 = Date.parse("2030-06-01T12:00:00.000Z");
const minute = 60_000;

describe.each(databaseTargets())("audit query on $name", (target) => {
  let db: Database;
  let audit: AuditWriter;
  let now = t0;

  beforeAll(async () => {
    db = await openTestDatabase(target);
    audit = createAuditWriter({ db, log: silentLogger, clock: { now: () => now } });
    // 30 events, one a minute: logins by u1/u2 (every third fails), settings updates by u1.
    for (let i = 0; i < 30; i++) {
      now = t0 + i * minute;
      await audit.write({
        actorType: i % 5 === 4 ? "system" : "user",
        actorId: i % 5 === 4 ? null : i % 2 === 0 ? "u1" : "u2",
        action: i % 4 === 3 ? "settings_update" : "login",
        target: `n:${i}`,
        outcome: i % 3 === 2 ? "failure" : "success",
        requestId: `req-${i}`,
        details: { i },
      });
    }
  });
  afterAll(async () => {
    await audit?.close();
    await db?.close();
  });

  const indexes = (events: { details: unknown }[]) =>
    events.map((e) => (e.details as { i: number }).i);

  it("lists newest first, every event exactly once across pages", async () => {
    const query = createAuditQuery({ db });
    const seen: number[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const page = await query.list({ pageSize: 7, pageToken });
      seen.push(...indexes(page.events));
      pageToken = page.nextPageToken;
      pages++;
    } while (pageToken);
    expect(pages).toBe(5);
    expect(seen).toEqual(Array.from({ length: 30 }, (_, i) => 29 - i));
  });

  it("filters by action, actor, actor type, outcome and time range, all together", async () => {
    const query = createAuditQuery({ db });
    const all = Array.from({ length: 30 }, (_, i) => i);
    const want = (keep: (i: number) => boolean) => all.filter(keep).reverse();
    const list = async (input: Parameters<typeof query.list>[0]) =>
      indexes((await query.list({ pageSize: 1000, ...input })).events);

    expect(await list({ action: "settings_update" })).toEqual(want((i) => i % 4 === 3));
    expect(await list({ actorId: "u2" })).toEqual(want((i) => i % 5 !== 4 && i % 2 === 1));
    expect(await list({ actorType: "system" })).toEqual(want((i) => i % 5 === 4));
    expect(await list({ outcome: "failure" })).toEqual(want((i) => i % 3 === 2));
    expect(
      await list({ since: new Date(t0 + 10 * minute), until: new Date(t0 + 20 * minute) }),
    ).toEqual(want((i) => i >= 10 && i < 20));
    expect(
      await list({
        action: "login",
        actorId: "u1",
        outcome: "success",
        since: new Date(t0 + 5 * minute),
      }),
    ).toEqual(want((i) => i >= 5 && i % 4 !== 3 && i % 5 !== 4 && i % 2 === 0 && i % 3 !== 2));
    expect(await list({ action: "nothing_like_this" })).toEqual([]);
  });

  it("returns events as stored, with their chain hashes", async () => {
    const [event] = (await createAuditQuery({ db }).list({ pageSize: 1 })).events;
    expect(event).toMatchObject({
      actorType: "system",
      actorId: null,
      action: "login",
      target: "n:29",
      outcome: "failure",
      requestId: "req-29",
      details: { i: 29 },
    });
    expect(event?.occurredAt.getTime()).toBe(t0 + 29 * minute);
    expect(event?.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(event?.prevHash).toMatch(/^[0-9a-f]{64}$/);
  });

  it("refuses bad filters and page tokens with 400 naming the field", async () => {
    const query = createAuditQuery({ db });
    const field = async (input: Parameters<typeof query.list>[0]) => {
      const err = await query.list(input).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DomainError);
      expect((err as DomainError).kind).toBe("invalid_argument");
      return (err as DomainError).field;
    };
    expect(await field({ actorType: "robot" })).toBe("actor_type");
    expect(await field({ outcome: "maybe" })).toBe("outcome");
    expect(await field({ since: new Date(t0), until: new Date(t0) })).toBe("until");
    expect(await field({ pageSize: 1001 })).toBe("page_size");
    expect(await field({ pageToken: "nonsense" })).toBe("page_token");
    const first = await query.list({ pageSize: 2, action: "login" });
    expect(await field({ pageToken: first.nextPageToken, action: "settings_update" })).toBe(
      "page_token",
    );
  });

  it("exports the matching events as JSON lines, oldest first, page by page", async () => {
    const out = new PassThrough({ highWaterMark: 64 });
    let text = "";
    out.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    const count = await runAuditExport(db, out, {
      ...parseAuditExportArgs([
        "--action",
        "login",
        "--since",
        new Date(t0 + minute).toISOString(),
      ]),
      pageSize: 4,
    });
    const lines = text
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const want = Array.from({ length: 30 }, (_, i) => i).filter((i) => i >= 1 && i % 4 !== 3);
    expect(count).toBe(want.length);
    expect(lines.map((l) => (l.details as { i: number }).i)).toEqual(want);
    expect(Object.keys(lines[0] ?? {})).toEqual([
      "seq",
      "id",
      "occurred_at",
      "actor_type",
      "actor_id",
      "action",
      "target",
      "outcome",
      "request_id",
      "client_address",
      "user_agent",
      "details",
      "prev_hash",
      "hash",
    ]);
    expect(lines[0]?.occurred_at).toBe(new Date(t0 + minute).toISOString());
    expect(() => parseAuditExportArgs(["--outcome", "meh"])).toThrow(/--outcome/);
    expect(() => parseAuditExportArgs(["--since", "yesterday-ish"])).toThrow(/--since/);
  });
});
