import { describe, expect, it } from "vitest";
import { prepareDetails, storableText } from "../../src/audit/details.js";
import { toRecord } from "../../src/audit/event.js";
import {
  type AuditRecord,
  canonicalEvent,
  canonicalJson,
  chainHash,
  eventHash,
  genesisHash,
  isSensitiveKey,
} from "../../src/audit/index.js";

const record: AuditRecord = {
  id: "0b0c7c55-5c0a-4f39-9d0e-6b8f1d8f3c11",
  occurredAt: "2025-03-01T12:34:56.789Z",
  actorType: "user",
  actorId: "u-1",
  action: "settings_update",
  target: "settings",
  outcome: "success",
  requestId: "req-1",
  details: { changed: ["log_level"], before: { log_level: "info" }, after: { log_level: "debug" } },
};

describe("canonical encoding", () => {
  it("is the same whatever order keys were inserted in, at any depth", () => {
    const a = { b: 1, a: { y: [1, { q: true, p: null }], x: "s" } };
    const b = { a: { x: "s", y: [1, { p: null, q: true }] }, b: 1 };
    expect(canonicalJson(a)).toBe(canonicalJson(b));
    expect(canonicalJson(a)).toBe('{"a":{"x":"s","y":[1,{"p":null,"q":true}]},"b":1}');

    const reordered: AuditRecord = {
      details: {
        after: { log_level: "debug" },
        before: { log_level: "info" },
        changed: ["log_level"],
      },
      requestId: "req-1",
      outcome: "success",
      target: "settings",
      action: "settings_update",
      actorId: "u-1",
      actorType: "user",
      occurredAt: "2025-03-01T12:34:56.789Z",
      id: "0B0C7C55-5C0A-4F39-9D0E-6B8F1D8F3C11",
    };
    expect(canonicalEvent(reordered)).toBe(canonicalEvent(record));
    expect(eventHash(genesisHash, reordered)).toBe(eventHash(genesisHash, record));
  });

  it("is the documented text: sorted keys, no spaces, version 1", () => {
    expect(canonicalEvent(record)).toBe(
      '{"action":"settings_update","actor_id":"u-1","actor_type":"user",' +
        '"details":{"after":{"log_level":"debug"},"before":{"log_level":"info"},' +
        '"changed":["log_level"]},"id":"0b0c7c55-5c0a-4f39-9d0e-6b8f1d8f3c11",' +
        '"occurred_at":"2025-03-01T12:34:56.789Z","outcome":"success","request_id":"req-1",' +
        '"target":"settings","v":1}',
    );
  });

  it("is version 2 with the request's origin, and version 1 without one", () => {
    const withOrigin = { ...record, clientAddress: "203.0.113.7", userAgent: 'ua "quoted"' };
    expect(canonicalEvent(withOrigin)).toBe(
      '{"action":"settings_update","actor_id":"u-1","actor_type":"user",' +
        '"client_address":"203.0.113.7",' +
        '"details":{"after":{"log_level":"debug"},"before":{"log_level":"info"},' +
        '"changed":["log_level"]},"id":"0b0c7c55-5c0a-4f39-9d0e-6b8f1d8f3c11",' +
        '"occurred_at":"2025-03-01T12:34:56.789Z","outcome":"success","request_id":"req-1",' +
        '"target":"settings","user_agent":"ua \\"quoted\\"","v":2}',
    );
    expect(canonicalEvent(withOrigin)).toBe(
      canonicalJson({
        v: 2,
        id: record.id,
        occurred_at: record.occurredAt,
        actor_type: record.actorType,
        actor_id: record.actorId,
        action: record.action,
        target: record.target,
        outcome: record.outcome,
        request_id: record.requestId,
        client_address: "203.0.113.7",
        user_agent: 'ua "quoted"',
        details: record.details,
      }),
    );
    // No origin (no request caused it): exactly the encoding events always had.
    const without = { ...record, clientAddress: null, userAgent: null };
    expect(canonicalEvent(without)).toBe(canonicalEvent(record));
    expect(canonicalEvent(without)).toContain('"v":1}');
    // An origin with an empty User-Agent is still an origin.
    expect(canonicalEvent({ ...without, clientAddress: "::1", userAgent: "" })).toContain(
      '"user_agent":"","v":2}',
    );
    const input = {
      actorType: "user" as const,
      action: "login",
      outcome: "success" as const,
      origin: { clientAddress: "10.0.0.1\u0000", userAgent: "x".repeat(2000) },
    };
    const stored = toRecord(input, "id", 0);
    expect(stored.clientAddress).toBe("10.0.0.1\uFFFD");
    expect(stored.userAgent?.length).toBeLessThan(1100);
    expect(toRecord({ ...input, origin: null }, "id", 0)).toMatchObject({
      clientAddress: null,
      userAgent: null,
    });
  });

  it("is canonicalJson of the event's fields, whatever their values", () => {
    for (const r of [
      record,
      { ...record, actorId: null, target: null, requestId: null, details: {} },
      { ...record, action: 'é "quoted" \\ \u2028 😀', details: { z: [1.5, -0, 1e21], a: null } },
    ]) {
      expect(canonicalEvent(r)).toBe(
        canonicalJson({
          v: 1,
          id: r.id,
          occurred_at: r.occurredAt,
          actor_type: r.actorType,
          actor_id: r.actorId,
          action: r.action,
          target: r.target,
          outcome: r.outcome,
          request_id: r.requestId,
          details: r.details,
        }),
      );
    }
  });

  it("hashes prev_hash, a newline and the canonical text with sha256", () => {
    // printf 'p\nc' | sha256sum
    expect(chainHash("p", "c")).toBe(
      "4a57acc0eafa4ed5b7216a98fa9d22e3243f632bdd6481e2c88f055322fe8d84",
    );
    expect(eventHash("p", record)).toBe(chainHash("p", canonicalEvent(record)));
    expect(eventHash(genesisHash, record)).toMatch(/^[0-9a-f]{64}$/);
    expect(eventHash("a".repeat(64), record)).not.toBe(eventHash(genesisHash, record));
  });

  const changes: [string, Partial<AuditRecord>][] = [
    ["id", { id: "0b0c7c55-5c0a-4f39-9d0e-6b8f1d8f3c12" }],
    ["occurredAt", { occurredAt: "2025-03-01T12:34:56.788Z" }],
    ["actorType", { actorType: "service" }],
    ["actorId", { actorId: "u-2" }],
    ["actorId null", { actorId: null }],
    ["action", { action: "settings_read" }],
    ["target", { target: "settings2" }],
    ["target empty vs null", { target: null }],
    ["outcome", { outcome: "denied" }],
    ["requestId", { requestId: "req-2" }],
    ["details value", { details: { ...record.details, changed: ["log_levem"] } }],
    ["details number", { details: { ...record.details, n: 1 } }],
    ["details type", { details: { ...record.details, changed: "log_level" } }],
  ];
  it.each(changes)("changes the hash when %s changes", (_, change) => {
    const changed = { ...record, ...change };
    expect(canonicalEvent(changed)).not.toBe(canonicalEvent(record));
    expect(eventHash(genesisHash, changed)).not.toBe(eventHash(genesisHash, record));
  });

  it("does not confuse field boundaries", () => {
    const a = { ...record, actorId: "a", target: "bc" };
    const b = { ...record, actorId: "ab", target: "c" };
    expect(eventHash(genesisHash, a)).not.toBe(eventHash(genesisHash, b));
  });
});

describe("details as stored", () => {
  it("redacts secrets and personal data at any depth, by key in any spelling", () => {
    const details = prepareDetails({
      password: "p1",
      newPassword: "p2",
      nested: { refresh_token: "t1", list: [{ "X-Api-Key": "k1", ok: 1 }], Authorization: "a" },
      totp_code: "123456",
      code: "654321",
      client_secret: "s1",
      email: "someone@example.org",
      payload: { any: "thing" },
      content: "document text",
      kept: "visible",
      payload_size: 12,
      token_ttl_seconds: 900,
      status_code: 200,
      header: "Bearer abc.def",
      jwt: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
    });
    const text = canonicalJson(details);
    for (const secret of ["p1", "p2", "t1", "k1", "123456", "654321", "s1", "someone@", "thing"]) {
      expect(text).not.toContain(`"${secret}`);
    }
    expect(text).not.toContain("document text");
    expect(text).not.toContain("abc.def");
    expect(text).not.toContain("eyJ");
    expect(details).toMatchObject({
      password: "[redacted]",
      nested: { refresh_token: "[redacted]", list: [{ "X-Api-Key": "[redacted]", ok: 1 }] },
      kept: "visible",
      payload_size: 12,
      token_ttl_seconds: 900,
      status_code: 200,
    });
  });

  it("knows which keys are sensitive", () => {
    for (const key of ["password", "api_key", "apiKey", "accessToken", "recovery_codes", "SSN"]) {
      expect(isSensitiveKey(key), key).toBe(true);
    }
    for (const key of ["action", "token_ttl_seconds", "error_code", "payload_size", "user_id"]) {
      expect(isSensitiveKey(key), key).toBe(false);
    }
  });

  it("follows JSON.stringify's rules and keeps __proto__ as a key", () => {
    const details = prepareDetails({
      when: new Date("2025-01-02T03:04:05.006Z"),
      skip: undefined,
      fn: () => 1,
      nan: Number.NaN,
      big: 12345678901234567890n,
      list: [undefined, 1],
      ...JSON.parse('{"__proto__": {"x": 1}}'),
    });
    expect(canonicalJson(details)).toBe(
      '{"__proto__":{"x":1},"big":"12345678901234567890","list":[null,1],"nan":null,' +
        '"when":"2025-01-02T03:04:05.006Z"}',
    );
  });

  it("refuses cycles and very deep nesting", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => prepareDetails(cyclic)).toThrow(TypeError);
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 40; i++) deep = { d: deep };
    expect(() => prepareDetails(deep)).toThrow(/deeper/);
  });

  it("replaces what PostgreSQL cannot store (NUL, unpaired surrogates) and keeps pairs", () => {
    expect(storableText("a\0b\uD800c\uDC00d\uD83D\uDE00")).toBe(
      "a\uFFFDb\uFFFDc\uFFFDd\uD83D\uDE00",
    );
  });

  it("validates the event's fields for its caller", () => {
    const valid = { actorType: "user", action: "login", outcome: "success" } as const;
    expect(toRecord(valid, "id", Date.UTC(2025, 0, 1, 0, 0, 0, 7)).occurredAt).toBe(
      "2025-01-01T00:00:00.007Z",
    );
    expect(() => toRecord({ ...valid, actorType: "robot" as "user" }, "id", 0)).toThrow(TypeError);
    expect(() => toRecord({ ...valid, outcome: "ok" as "success" }, "id", 0)).toThrow(TypeError);
    expect(() => toRecord({ ...valid, action: "" }, "id", 0)).toThrow(TypeError);
  });
});
