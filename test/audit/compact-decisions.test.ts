import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type CanonicalDetails, canonicalJson } from "../../src/audit/canonical.js";
import { createDecisionRecorder } from "../../src/audit/decision-record.js";
import { type JsonValue, prepareDetails } from "../../src/audit/details.js";
import { toRecord } from "../../src/audit/event.js";
import {
  type AuditEventRow,
  type AuditWriter,
  createAuditWriter,
  readAuditEvents,
  runAuditExport,
  verifyAuditChain,
} from "../../src/audit/index.js";
import { valueRef } from "../../src/audit/values.js";
import { silentLogger } from "../../src/log.js";
import { createPolicyDecisions, type DecisionCaller } from "../../src/policy/decisions.js";
import { compilePolicy, createTraitRegistry, defaultPolicy } from "../../src/policy/index.js";
import type { LivePolicy } from "../../src/policy/live.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";

/**
 * Compact decision records (docs/audit.md, "Compact decision records"): a decision event names
 * its inputs and outcome by ref; the values are stored once in audit_values. The audit API's
 * reader and the export give the full form back, `audit verify` covers the values, and the
 * stored rows stay small. On PGlite and on PostgreSQL (TEST_DATABASE_URL).
 */

const registered = [
  ...Array.from({ length: 14 }, (_, i) => ({ name: `compliance:training_${i}` })),
  ...Array.from({ length: 10 }, (_, i) => ({ name: `capability:c${i}` })),
];
const engine = compilePolicy(defaultPolicy, createTraitRegistry(registered));
const live: LivePolicy = {
  current: () => engine,
  generation: () => 1,
  refresh: async () => {},
  install: () => {},
  close: async () => {},
};
const caller: DecisionCaller = {
  kind: "service",
  userId: "5d0c5a52-2f7e-4a53-9a1c-7f1e54b7b0a1",
  roles: ["service"],
  origin: { clientAddress: "203.0.113.9", userAgent: "grpc-node-js/1.14.3" },
};
const userId = "0b6f8a9e-6a43-4d2f-8f6e-2a4b3f0c9d11";
// A principal with many traits, as the benchmark's and real workloads' principals have.
const traits = [
  "role:analyst",
  "role:clinician",
  ...Array.from({ length: 14 }, (_, i) => `compliance:training_${i}`),
];
const request = {
  traits,
  context: "USER_ACTION",
  classifications: ["pii", "phi"],
  userId,
  resource: { owner: "x", note: "y" },
};

describe.each(databaseTargets())("compact decision records, on $name", (target) => {
  let db: Database;
  let writer: AuditWriter;
  let unaryIds: string[];
  let batchIds: string[];

  beforeAll(async () => {
    db = await openTestDatabase(target);
    writer = createAuditWriter({ db, log: silentLogger });
    const decisions = createPolicyDecisions({ live, audit: writer });
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => decisions.evaluate(caller, "req-u", request)),
    );
    unaryIds = answers.map((a) => a.decisionId);
    const batch = await decisions.evaluateBatch(
      caller,
      "req-b",
      Array.from({ length: 50 }, (_, i) => ({
        ...request,
        traits: [...traits, `capability:c${i % 10}`],
        context: i < 25 ? "USER_ACTION" : "AI_INFERENCE",
      })),
    );
    batchIds = batch.map((a) => a.decisionId);
  });
  afterAll(async () => {
    await writer?.close();
    await db?.close();
  });

  const events = (action: string) =>
    readAuditEvents(db, { filter: { action }, order: "oldest", limit: 100 });

  it("stores each distinct inputs and outcome once", async () => {
    const { rows } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM audit_values");
    const unary = await events("policy_decision");
    const [batch] = await events("policy_decision_batch");
    // The five unary decisions asked the same and were answered the same: two values.
    const unaryRefs = new Set(unary.flatMap((e) => e.storedDetails?.refs as string[]));
    expect(unaryRefs.size).toBe(2);
    // The batch's 50 decisions have 20 distinct inputs (10 capabilities × 2 contexts).
    const batchRefs = batch?.storedDetails?.refs as string[];
    const pairs = batch?.storedDetails?.decisions as [number, number][];
    expect(new Set(pairs.map(([i]) => batchRefs[i])).size).toBe(20);
    expect(Number(rows[0]?.n)).toBe(new Set([...unaryRefs, ...batchRefs]).size);
  });

  it("gives the full record back through the audit log's reader", async () => {
    const unary = await events("policy_decision");
    expect(unary.map((e) => e.details.decision_id)).toEqual(unaryIds);
    expect(unary.map((e) => e.id)).toEqual(unaryIds);
    for (const e of unary) {
      expect(e.details).toMatchObject({
        via: "evaluate",
        user_id: userId,
        traits,
        classifications: ["pii", "phi"],
        context: "USER_ACTION",
        resource_attributes: ["owner", "note"],
        policy_version: engine.version,
        decision: expect.stringMatching(/^(allow|deny|sanitize)$/),
        reason_code: expect.any(String),
        matched_rules: expect.any(Array),
      });
      expect(e.target).toBe(`user:${userId}`);
      expect(e.storedDetails?.refs).toHaveLength(2);
    }
    const [batch] = await events("policy_decision_batch");
    const decided = batch?.details.decisions as Record<string, unknown>[];
    expect(batch?.details.count).toBe(50);
    expect(batch?.details.policy_version).toBe(engine.version);
    expect(decided.map((d) => d.decision_id)).toEqual(batchIds);
    expect(new Set(batchIds).size).toBe(50);
    decided.forEach((d, i) => {
      expect(d).toMatchObject({
        user_id: userId,
        traits: [...traits, `capability:c${i % 10}`],
        context: i < 25 ? "USER_ACTION" : "AI_INFERENCE",
        policy_version: engine.version,
      });
    });
  });

  it("exports the full record with what the hash covers", async () => {
    const lines: string[] = [];
    const sink = Object.assign(
      {
        write: (line: string) => {
          lines.push(line);
          return true;
        },
      },
      { once: () => sink },
    );
    await runAuditExport(db, sink as never, { filter: { action: "policy_decision" } });
    const exported = lines.map((l) => JSON.parse(l) as Record<string, Record<string, unknown>>);
    expect(exported).toHaveLength(5);
    expect(exported[0]?.details?.traits).toEqual(traits);
    expect(exported[0]?.stored_details?.refs).toHaveLength(2);
    // Each line carries the values its stored details name, so that it verifies offline: each
    // ref is the hash of its value's canonical JSON.
    for (const line of exported) {
      const refs = line.stored_details?.refs as string[];
      expect(Object.keys(line.values ?? {}).sort()).toEqual([...new Set(refs)].sort());
      for (const [ref, value] of Object.entries(line.values ?? {})) {
        expect(valueRef(canonicalJson(value as JsonValue))).toBe(ref);
      }
    }
  });

  it("keeps a unary decision's row under 512 bytes and a batched one under 128", async () => {
    const { rows } = await db.query<{ action: string; per_decision: number }>(
      `SELECT action,
         avg(pg_column_size(e.*)::float8 /
             CASE WHEN action = 'policy_decision_batch' THEN (details->>'count')::int ELSE 1 END
         ) AS per_decision
       FROM audit_events e WHERE action LIKE 'policy_decision%' GROUP BY action`,
    );
    const size = new Map(rows.map((r) => [r.action, Number(r.per_decision)]));
    expect(size.get("policy_decision")).toBeLessThanOrEqual(512);
    expect(size.get("policy_decision_batch")).toBeLessThanOrEqual(128);
  });

  it("verifies the values the events name, and finds one changed or removed", async () => {
    expect(await verifyAuditChain(db, { pageSize: 3 })).toMatchObject({ ok: true });
    // However few values it remembers as checked: a value known good when a page's values
    // were fetched (so not fetched again) must not be forgotten before the page's events.
    expect(await verifyAuditChain(db, { pageSize: 2, valueCacheSize: 1 })).toMatchObject({
      ok: true,
    });
    const [first] = await events("policy_decision");
    const ref = (first as AuditEventRow).storedDetails?.refs as string[];
    const tampered = async (sql: string) => {
      await db.session(async (session) => {
        await session.exec("ALTER TABLE audit_values DISABLE TRIGGER USER");
        try {
          await session.query(sql, [ref[0]]);
        } finally {
          await session.exec("ALTER TABLE audit_values ENABLE TRIGGER USER");
        }
      });
    };
    await tampered(
      `UPDATE audit_values SET value = jsonb_set(value, '{traits,0}', '"role:admin"') WHERE ref = $1`,
    );
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      firstBroken: { id: first?.id, reason: "value_mismatch" },
    });
    // The reader (audit API, console, export) never shows the edited value as what was
    // decided: it names the ref as altered, and the traits are not there.
    const [altered] = await events("policy_decision");
    expect(altered?.details).toMatchObject({ altered_refs: [ref[0]], unresolved_refs: [ref[0]] });
    expect(JSON.stringify(altered?.details)).not.toContain("role:admin");
    await tampered("DELETE FROM audit_values WHERE ref = $1");
    expect(await verifyAuditChain(db)).toMatchObject({
      ok: false,
      firstBroken: { id: first?.id, reason: "value_missing" },
    });
    const [unresolved] = await events("policy_decision");
    expect(unresolved?.details.unresolved_refs).toEqual([ref[0]]);
  });
});

describe("the decision recorder", () => {
  const inputs = { userId, traits, classifications: ["pii"], context: "USER_ACTION" };
  const fields = {
    policyVersion: "v1",
    decision: "allow",
    reasonCode: "RULE_ALLOW",
    decidingRule: "read",
    matchedRules: ["read"],
  };

  it("keeps a frozen outcome's value by identity: its fields are read for the first record only", () => {
    const recorder = createDecisionRecorder();
    let reads = 0;
    const frozen = Object.freeze({
      ...fields,
      get decision() {
        reads++;
        return "allow";
      },
      matchedRules: Object.freeze(["read"]),
    });
    const first = recorder.unary("evaluate", inputs, frozen);
    const once = reads;
    expect(once).toBeGreaterThan(0);
    for (let i = 0; i < 10; i++) {
      expect(recorder.unary("evaluate", inputs, frozen).canonicalDetails.value).toEqual(
        first.canonicalDetails.value,
      );
      expect(recorder.batch([{ inputs, outcome: frozen }]).values[1]).toEqual(first.values[1]);
    }
    expect(reads).toBe(once);
  });

  it("names an outcome by its content, frozen or not", () => {
    const recorder = createDecisionRecorder();
    const frozen = recorder.unary("evaluate", inputs, Object.freeze({ ...fields }));
    const copy = recorder.unary("evaluate", inputs, { ...fields, matchedRules: ["read"] });
    const other = recorder.unary("evaluate", inputs, { ...fields, decision: "deny" });
    expect(copy.canonicalDetails.value).toEqual(frozen.canonicalDetails.value);
    expect(copy.values[1]).toEqual(frozen.values[1]);
    expect(other.values[1]?.ref).not.toBe(frozen.values[1]?.ref);
    // A fresh recorder (another process) names it the same.
    expect(createDecisionRecorder().unary("evaluate", inputs, { ...fields }).values[1]).toEqual(
      frozen.values[1],
    );
  });

  it("encodes a batch's traits once when its requests carry equal lists", () => {
    const recorder = createDecisionRecorder();
    const lists = Array.from({ length: 50 }, () => traits.map((t) => ` ${t}`.slice(1)));
    const batch = lists.map((list, k) => ({
      inputs: { ...inputs, traits: list, context: k % 2 ? "SEARCH" : "USER_ACTION" },
      outcome: fields,
    }));
    const stringify = vi.spyOn(JSON, "stringify");
    let record: ReturnType<typeof recorder.batch>;
    try {
      record = recorder.batch(batch);
    } finally {
      const encoded = stringify.mock.calls.filter(([arg]) =>
        lists.some((list) => arg === list || (Array.isArray(arg) && arg.includes(list))),
      ).length;
      stringify.mockRestore();
      // Before: each decision's key held its list (50).
      expect(encoded).toBeLessThanOrEqual(2);
    }
    // The same record as decisions recorded one by one by fresh recorders (other processes).
    const one = (k: number) => createDecisionRecorder().unary("evaluate", batch[k]!.inputs, fields);
    expect(record.values.map((v) => v.ref).sort()).toEqual(
      [...new Set([0, 1].flatMap((k) => one(k).values.map((v) => v.ref)))].sort(),
    );
    expect(record.canonicalDetails.value.decisions).toEqual(
      lists.map((_, k) => (k % 2 ? [2, 1] : [0, 1])),
    );
  });

  it("names a list by its content when it changes after it was recorded", () => {
    const recorder = createDecisionRecorder();
    const list = [...traits];
    const before = recorder.batch([
      { inputs: { ...inputs, traits: list }, outcome: fields },
      { inputs: { ...inputs, traits: list }, outcome: fields },
    ]);
    list.push("clearance:top_secret");
    const after = recorder.batch([
      { inputs: { ...inputs, traits: list }, outcome: fields },
      { inputs: { ...inputs, traits: [...list] }, outcome: fields },
    ]);
    expect(after.values[0]?.ref).not.toBe(before.values[0]?.ref);
    expect(after.canonicalDetails.value.decisions).toEqual([
      [0, 1],
      [0, 1],
    ]);
    expect(JSON.parse(after.values[0]!.json).traits).toContain("clearance:top_secret");
  });

  it("never takes one decision's inputs for another's: lists, empty names, optional parts", () => {
    const recorder = createDecisionRecorder();
    const variants = [
      { ...inputs, traits: ["a", "b"], classifications: [] },
      { ...inputs, traits: ["a"], classifications: ["b"] },
      { ...inputs, traits: ["a", "b", ""], classifications: [] },
      { ...inputs, traits: ["a", "b"], classifications: [""] },
      { ...inputs, traits: ["b", "a"], classifications: [] },
      { ...inputs, traits: [], classifications: ["a", "b"] },
      { ...inputs, traits: ["a", "b"], classifications: [], resourceAttributes: [] },
      { ...inputs, traits: ["a", "b"], classifications: [], resourceAttributes: [""] },
      { ...inputs, traits: ["a", "b"], classifications: [], resourceAttributes: ["65"] },
      {
        ...inputs,
        traits: ["a", "b"],
        classifications: [],
        resourceAttributes: [],
        resourceAttributeCount: 65,
      },
      { ...inputs, traits: ["a"], classifications: ["b"], resourceAttributes: [] },
      { ...inputs, traits: ["a"], classifications: ["b"], resourceAttributes: ["c"] },
      { ...inputs, traits: ["a"], classifications: ["b", "c"], resourceAttributes: [] },
      {
        ...inputs,
        traits: ["a"],
        classifications: ["b"],
        resourceAttributes: ["c"],
        resourceAttributeCount: 65,
      },
      { ...inputs, traits: ["a"], classifications: [], resourceAttributeCount: 65 },
      { ...inputs, userId: "", traits: ["a", "b"], classifications: [] },
      { ...inputs, context: "SEARCH", traits: ["a", "b"], classifications: [] },
      { ...inputs, userId: "SEARCH", context: "", traits: ["a", "b"], classifications: [] },
    ];
    // Twice, in turn: the second pass walks paths that exist.
    for (let pass = 0; pass < 2; pass++) {
      const refs = variants.map((v) => recorder.unary("evaluate", v, fields).values[0]!);
      expect(new Set(refs.map((r) => r.ref)).size).toBe(variants.length);
      refs.forEach((value, k) => {
        // Each named by its own content: what a fresh recorder (another process) makes of it.
        expect(value).toEqual(
          createDecisionRecorder().unary("evaluate", variants[k]!, fields).values[0],
        );
      });
    }
  });

  it("stays bounded, and names inputs the same after the trie started over", () => {
    const recorder = createDecisionRecorder(4);
    const first = recorder.unary("evaluate", inputs, fields).values[0]!;
    for (let k = 0; k < 200; k++) {
      recorder.unary(
        "evaluate",
        { ...inputs, traits: [...traits, `capability:c${k % 10}`, String(k)] },
        fields,
      );
    }
    expect(recorder.unary("evaluate", inputs, fields).values[0]).toEqual(first);
  });

  it("gives details in their stored form: what redaction and canonical JSON would make of them", () => {
    const recorder = createDecisionRecorder();
    const stored = (d: CanonicalDetails) => {
      expect(prepareDetails(d.value)).toEqual(d.value);
      expect(d.json).toBe(canonicalJson(prepareDetails(d.value)));
    };
    stored(recorder.unary("evaluate", inputs, fields).canonicalDetails);
    stored(
      recorder.unary("sanitize", inputs, fields, { removed_fields: 3, redacted_patterns: 12 })
        .canonicalDetails,
    );
    // Indexes past one digit, repeated and interleaved pairs, one decision.
    const many = Array.from({ length: 40 }, (_, k) => ({
      inputs: { ...inputs, context: `C${k % 17}` },
      outcome: { ...fields, decision: k % 3 ? "allow" : "deny" },
    }));
    stored(recorder.batch(many).canonicalDetails);
    stored(recorder.batch(many.slice(0, 1)).canonicalDetails);
    stored(recorder.batch([]).canonicalDetails);
  });

  it("takes stored-form details only as CanonicalDetails, and never beside details", () => {
    const base = {
      actorType: "service" as const,
      action: "policy_decision",
      outcome: "success" as const,
    };
    const canonical = createDecisionRecorder().unary("evaluate", inputs, fields).canonicalDetails;
    expect(toRecord({ ...base, canonicalDetails: canonical }, crypto.randomUUID(), 0).details).toBe(
      canonical.value,
    );
    expect(() =>
      toRecord({ ...base, canonicalDetails: canonical, details: { a: 1 } }, crypto.randomUUID(), 0),
    ).toThrow(TypeError);
    const forged = { value: { token: "Bearer secret" }, json: "{}" } as unknown as CanonicalDetails;
    expect(() => toRecord({ ...base, canonicalDetails: forged }, crypto.randomUUID(), 0)).toThrow(
      TypeError,
    );
  });
});
