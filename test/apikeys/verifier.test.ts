import { describe, expect, it } from "vitest";
import type { ApiKeyCredential } from "../../src/apikeys/api-key-store.js";
import { generateKey } from "../../src/apikeys/key-format.js";
import { createApiKeyVerifier } from "../../src/apikeys/verifier.js";
import { DomainError } from "../../src/errors.js";
import { createLogger } from "../../src/log.js";

/**
 * The API key verifier with a store in memory and a clock the test moves: the key's form,
 * unknown prefix and wrong secret told apart from nobody, revocation and expiry, the 1 s
 * cache and the immediate effect of this process's own revocations.
 */

function setup(options: { ttlMs?: number } = {}) {
  let now = Date.parse("2031-01-01T00:00:00.000Z");
  const rows = new Map<string, ApiKeyCredential>();
  const reads: string[] = [];
  const touches: { id: string; at: number }[] = [];
  /** When set, lookups wait for this before answering (a slow database). */
  let gate: Promise<void> | undefined;
  const logs: string[] = [];
  const verifier = createApiKeyVerifier({
    store: {
      async findByPrefix(prefix) {
        reads.push(prefix);
        const row = rows.get(prefix);
        const snapshot = row && { ...row };
        if (gate) await gate;
        return snapshot;
      },
      async touch(id, at) {
        touches.push({ id, at: at.getTime() });
      },
    },
    clock: { now: () => now },
    log: createLogger({ level: "debug", destination: { write: (l: string) => void logs.push(l) } }),
    ...(options.ttlMs === undefined ? {} : { cacheTtlMs: options.ttlMs }),
  });
  function add(scopes: string[], extra: Partial<ApiKeyCredential> = {}) {
    const { key, prefix, secretHash } = generateKey();
    const row: ApiKeyCredential = {
      id: `id-${prefix}`,
      secretHash,
      scopes,
      expiresAt: null,
      revokedAt: null,
      ...extra,
    };
    rows.set(prefix, row);
    return { key, prefix, row };
  }
  return {
    verifier,
    add,
    reads,
    touches,
    logs,
    advance: (ms: number) => {
      now += ms;
    },
    now: () => now,
    hold: () => {
      let release = () => {};
      gate = new Promise<void>((r) => {
        release = r;
      });
      return () => {
        gate = undefined;
        release();
      };
    },
  };
}

async function refusal(p: Promise<unknown>) {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DomainError);
  const e = err as DomainError;
  expect(e.kind).toBe("unauthenticated");
  expect(e.reason).toBe("API_KEY_INVALID");
  return e.message;
}

describe("API key verifier", () => {
  it("accepts a valid key with its id, scopes and expiry", async () => {
    const t = setup();
    const { key, row } = t.add(["settings:read"]);
    expect(await t.verifier.verify(key)).toEqual({
      id: row.id,
      scopes: ["settings:read"],
      expiresAt: row.expiresAt,
    });
  });

  it.each([
    ["empty", ""],
    ["another type", "ghp_abcdefgh_0123456789012345678901234567890123456789012"],
    ["a short secret", "tgk_abcdefgh_short"],
    ["upper-case prefix", `tgk_ABCDEFGH_${"a".repeat(43)}`],
    ["a trailing character", `tgk_abcdefgh_${"a".repeat(44)}`],
    ["a bearer token", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig"],
  ])("refuses %s without reading the database", async (_, text) => {
    const t = setup();
    expect(await refusal(t.verifier.verify(text))).toMatch(/not a Traitgate API key/);
    expect(t.reads).toEqual([]);
  });

  it("answers an unknown prefix and a wrong secret alike, even for a revoked key", async () => {
    const t = setup();
    const { key } = t.add(["settings:read"]);
    const revoked = t.add(["settings:read"], { revokedAt: new Date(t.now()) });
    const unknown = generateKey().key;
    const wrongSecret = `${key.slice(0, 13)}${generateKey().key.slice(13)}`;
    const wrongOnRevoked = `${revoked.key.slice(0, 13)}${generateKey().key.slice(13)}`;
    const messages = [
      await refusal(t.verifier.verify(unknown)),
      await refusal(t.verifier.verify(wrongSecret)),
      await refusal(t.verifier.verify(wrongOnRevoked)),
    ];
    expect(new Set(messages).size).toBe(1);
    expect(messages[0]).not.toMatch(/revoked|expired/);
  });

  it("says revoked or expired only to the holder of the key", async () => {
    const t = setup();
    const revoked = t.add(["audit:read"], { revokedAt: new Date(t.now() - 1) });
    const expiring = t.add(["audit:read"], { expiresAt: new Date(t.now() + 5_000) });
    expect(await refusal(t.verifier.verify(revoked.key))).toMatch(/revoked/);
    expect(await t.verifier.verify(expiring.key)).toMatchObject({ id: expiring.row.id });
    t.advance(4_999);
    expect(await t.verifier.verify(expiring.key)).toMatchObject({ id: expiring.row.id });
    t.advance(1);
    expect(await refusal(t.verifier.verify(expiring.key))).toMatch(/expired/);
  });

  it("reads a key at most once a second: another process's revocation applies within 1 s", async () => {
    const t = setup();
    const { key, prefix, row } = t.add(["settings:read"]);
    await t.verifier.verify(key);
    // Revoked in the database by another process: this one does not know yet.
    row.revokedAt = new Date(t.now());
    t.advance(999);
    await t.verifier.verify(key);
    await t.verifier.verify(key);
    expect(t.reads).toEqual([prefix]);
    t.advance(1);
    expect(await refusal(t.verifier.verify(key))).toMatch(/revoked/);
    expect(t.reads).toEqual([prefix, prefix]);
  });

  it("shares one read among concurrent checks of one key", async () => {
    const t = setup();
    const { key, prefix } = t.add(["settings:read"]);
    const release = t.hold();
    const checks = Array.from({ length: 20 }, () => t.verifier.verify(key));
    release();
    await Promise.all(checks);
    expect(t.reads).toEqual([prefix]);
  });

  it("applies this process's revocation at once, even over a lookup already running", async () => {
    const t = setup();
    const { key, prefix, row } = t.add(["settings:read"]);
    await t.verifier.verify(key);
    row.revokedAt = new Date(t.now());
    t.verifier.forget(prefix);
    expect(await refusal(t.verifier.verify(key))).toMatch(/revoked/);

    const other = t.add(["settings:read"]);
    const release = t.hold();
    // This lookup read the row before the revocation...
    const before = t.verifier.verify(other.key);
    other.row.revokedAt = new Date(t.now());
    t.verifier.forget(other.prefix);
    release();
    await before;
    // ...but a check after forget() reads again instead of joining it or using its result.
    expect(await refusal(t.verifier.verify(other.key))).toMatch(/revoked/);
  });

  it("records a key's use at most once a minute", async () => {
    const t = setup();
    const { key, row } = t.add(["settings:read"]);
    const start = t.now();
    await t.verifier.verify(key);
    t.advance(30_000);
    await t.verifier.verify(key);
    t.advance(30_000);
    await t.verifier.verify(key);
    expect(t.touches).toEqual([
      { id: row.id, at: start },
      { id: row.id, at: start + 60_000 },
    ]);
  });

  it("never logs the key or its secret", async () => {
    const t = setup();
    const { key } = t.add(["settings:read"]);
    const wrong = `${key.slice(0, 13)}${generateKey().key.slice(13)}`;
    await t.verifier.verify(key);
    await refusal(t.verifier.verify(wrong));
    expect(t.logs.length).toBeGreaterThan(0);
    const all = t.logs.join("\n");
    expect(all).not.toContain(key.slice(13));
    expect(all).not.toContain(wrong.slice(13));
  });
});
