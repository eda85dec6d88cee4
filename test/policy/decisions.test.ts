import { describe, expect, it } from "vitest";
import {
  type AuditEventInput,
  expandDecisionDetails,
  type JsonObject,
  type JsonValue,
} from "../../src/audit/index.js";
import { DomainError, unavailable } from "../../src/errors.js";
import { createPolicyDecisions, type DecisionCaller } from "../../src/policy/decisions.js";
import { compilePolicy, createTraitRegistry, defaultPolicy } from "../../src/policy/index.js";
import type { LivePolicy } from "../../src/policy/live.js";

/** The decision domain with a controllable audit writer: record first, answer after. */

/** An event's details in the full form, its values resolved as the audit API does. */
const full = (event: AuditEventInput | undefined): JsonObject =>
  expandDecisionDetails(
    event?.action ?? "",
    event?.id ?? "",
    JSON.parse(event?.canonicalDetails?.json ?? JSON.stringify(event?.details ?? {})) as JsonObject,
    new Map((event?.values ?? []).map((v) => [v.ref, JSON.parse(v.json) as JsonValue])),
  );

const engine = compilePolicy(defaultPolicy, createTraitRegistry());
const live: LivePolicy = {
  current: () => engine,
  generation: () => 1,
  refresh: async () => {},
  install: () => {},
  close: async () => {},
};
const service: DecisionCaller = { kind: "service", userId: "svc-1", roles: [] };
const request = { traits: ["role:analyst"], context: "USER_ACTION", classifications: ["pii"] };

describe("policy decisions and the audit log", () => {
  it("tells of a batch's decisions by runs of answers alike, each counted once", async () => {
    const told: [string, string, number][] = [];
    const decisions = createPolicyDecisions({
      live,
      audit: { write: async () => ({ id: "e", seq: "1", hash: "h" }) },
      onDecision: (d, count) => told.push([d.decision, d.reasonCode, count]),
    });
    const deny = { traits: [], context: "USER_ACTION" };
    const batch = [request, request, deny, request, deny, deny, deny];
    const answers = await decisions.evaluateBatch(service, undefined, batch);
    expect(told).toEqual([
      ["sanitize", "RULE_SANITIZE", 2],
      ["deny", "NO_MATCH", 1],
      ["sanitize", "RULE_SANITIZE", 1],
      ["deny", "NO_MATCH", 3],
    ]);
    expect(answers.map((a) => a.decision)).toEqual(told.flatMap(([d, , n]) => Array(n).fill(d)));
  });

  it("answers only once the audit event is committed, with its decision id", async () => {
    const written: AuditEventInput[] = [];
    let commit: () => void = () => {};
    const decisions = createPolicyDecisions({
      live,
      audit: {
        write: (event) => {
          written.push(event);
          return new Promise((resolve) => {
            commit = () => resolve({ id: "e", seq: "1", hash: "h" });
          });
        },
      },
    });
    let answered = false;
    const pending = decisions.evaluate(service, "req-1", request).then((a) => {
      answered = true;
      return a;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(written).toHaveLength(1);
    expect(answered).toBe(false);
    commit();
    const answer = await pending;
    expect(answer.decision).toBe("sanitize");
    expect(written[0]?.id).toBe(answer.decisionId);
    expect(full(written[0])).toMatchObject({
      decision_id: answer.decisionId,
      decision: "sanitize",
      reason_code: "RULE_SANITIZE",
      matched_rules: ["data-confidential", "data-pii-sanitize"],
      policy_version: engine.version,
      traits: ["role:analyst"],
      classifications: ["pii"],
    });
    expect(written[0]).toMatchObject({
      actorType: "service",
      actorId: "svc-1",
      requestId: "req-1",
    });
  });

  it("records at most 64 resource attribute names, with their count", async () => {
    const written: AuditEventInput[] = [];
    const decisions = createPolicyDecisions({
      live,
      audit: {
        write: async (event) => {
          written.push(event);
          return { id: "e", seq: "1", hash: "h" };
        },
      },
    });
    const resource = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`a${i}`, i]));
    await decisions.evaluate(service, "req-many", { ...request, resource });
    expect(full(written[0]).resource_attributes).toHaveLength(64);
    expect(full(written[0]).resource_attribute_count).toBe(1000);
  });

  it("fails closed when the audit log cannot be written: no decision", async () => {
    const decisions = createPolicyDecisions({
      live,
      audit: { write: () => Promise.reject(unavailable("AUDIT_UNAVAILABLE", "down")) },
    });
    for (const call of [
      () => decisions.evaluate(service, undefined, request),
      () => decisions.evaluateBatch(service, undefined, [request, request]),
      () => decisions.explain(service, undefined, request),
      () => decisions.sanitize(service, undefined, request, { name: "Ada" }),
    ]) {
      const err = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(DomainError);
      expect((err as DomainError).kind).toBe("unavailable");
      expect((err as DomainError).reason).toBe("AUDIT_UNAVAILABLE");
    }
  });

  it("never records the document a Sanitize call carries", async () => {
    const written: AuditEventInput[] = [];
    const decisions = createPolicyDecisions({
      live,
      audit: {
        write: async (event) => {
          written.push(event);
          return { id: "e", seq: "1", hash: "h" };
        },
      },
    });
    const out = await decisions.sanitize(service, undefined, request, {
      name: "Ada Lovelace",
      note: "mail ada@example.org",
    });
    expect(out.document).toEqual({ note: "mail [REDACTED:EMAIL]" });
    const text = JSON.stringify(written);
    expect(text).not.toContain("Lovelace");
    expect(text).not.toContain("ada@example.org");
    expect(JSON.parse(written[0]?.canonicalDetails?.json ?? "{}")).toMatchObject({
      removed_fields: 1,
      redacted_patterns: 1,
    });
  });

  it("refuses a user deciding about another user unless admin or service", async () => {
    const decisions = createPolicyDecisions({
      live,
      audit: { write: async () => ({ id: "e", seq: "1", hash: "h" }) },
    });
    const user: DecisionCaller = { kind: "user", userId: "u1", roles: ["viewer"] };
    const err = await decisions.evaluate(user, undefined, { ...request, userId: "u2" }).then(
      () => undefined,
      (e: unknown) => e as DomainError,
    );
    expect(err?.reason).toBe("USER_MISMATCH");
    expect(err?.field).toBe("user_id");
    // In a batch the error names the request.
    const inBatch = await decisions
      .evaluateBatch(user, undefined, [
        request,
        { ...request, userId: "u1" },
        { ...request, userId: "u2" },
      ])
      .then(
        () => undefined,
        (e: unknown) => e as DomainError,
      );
    expect(inBatch?.reason).toBe("USER_MISMATCH");
    expect(inBatch?.field).toBe("requests[2].user_id");
    const adminUser: DecisionCaller = { kind: "user", userId: "u1", roles: ["admin"] };
    await expect(
      decisions.evaluate(adminUser, undefined, { ...request, userId: "u2" }),
    ).resolves.toMatchObject({ decision: "sanitize" });
  });
});
