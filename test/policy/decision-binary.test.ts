import { create, toBinary } from "@bufbuild/protobuf";
import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  EvaluateBatchRequestSchema,
  EvaluateBatchResponseSchema,
  EvaluateRequestSchema,
  EvaluateResponseSchema,
} from "../../gen/traitgate/policy/v1/policy_pb.js";
import {
  encodeEvaluateBatchResponse,
  encodeEvaluateResponse,
} from "../../src/policy/decision-binary.js";
import { decisionMessage, evaluateBatchResponse } from "../../src/policy/decision-message.js";
import type { DecisionAnswer, PolicyDecisions } from "../../src/policy/decisions.js";
import { compilePolicy, createTraitRegistry, defaultPolicy } from "../../src/policy/index.js";
import type { PolicyAdmin } from "../../src/policy/policy-admin.js";
import { createPolicyService } from "../../src/policy/service.js";
import { principalKey } from "../../src/server/context.js";
import { presetResponseOf } from "../../src/server/preset-encoding.js";
import { answerShapes as answers, base, via } from "./answers.js";

/**
 * src/policy/decision-binary.ts writes the answers' protobuf binary itself, keeping the bytes of
 * what the engine's shared answers repeat. It must write exactly what protobuf-es writes for the
 * message the service builds (src/policy/decision-message.ts), for every shape of answer, and
 * never send bytes kept for another answer.
 */

const bytes = (b: Uint8Array) => Buffer.from(b);

/** The same bytes (or where they first differ: comparing megabytes with toEqual is slow). */
function expectSame(got: Uint8Array, want: Uint8Array) {
  const a = bytes(got);
  const b = bytes(want);
  if (a.equals(b)) return;
  let at = 0;
  while (at < a.length && a[at] === b[at]) at++;
  expect({ length: a.length, at, got: a.subarray(at, at + 16) }).toEqual({
    length: b.length,
    at,
    got: b.subarray(at, at + 16),
  });
}

describe("answers in the protobuf binary format", () => {
  it.each(Object.entries(answers))("writes what protobuf-es writes: %s", (_, d) => {
    const want = bytes(toBinary(EvaluateResponseSchema, decisionMessage(d)));
    // Twice: the second time from what was kept.
    expect(bytes(encodeEvaluateResponse(d))).toEqual(want);
    expect(bytes(encodeEvaluateResponse(d))).toEqual(want);
  });

  it("writes a batch as protobuf-es does, 1,000 answers of every shape", () => {
    const all = Object.values(answers);
    const list = Array.from({ length: 1000 }, (_, k) => ({
      ...all[k % all.length]!,
      decisionId: `0190f3a2-7c1e-7b2a-9d4e-${String(k).padStart(12, "0")}`,
    }));
    const want = bytes(toBinary(EvaluateBatchResponseSchema, evaluateBatchResponse(list)));
    expectSame(encodeEvaluateBatchResponse(list), want);
    expect(bytes(encodeEvaluateBatchResponse([]))).toEqual(
      bytes(toBinary(EvaluateBatchResponseSchema, evaluateBatchResponse([]))),
    );
  });

  it("never sends what was kept for another answer sharing its lists", () => {
    const shared = Object.freeze(["r"]);
    const one = { ...base, matchedRules: shared, impliedTraits: [] };
    const variants: DecisionAnswer[] = [
      one,
      { ...one, policyVersion: "a".repeat(64) },
      { ...one, reason: "another reason" },
      { ...one, decision: "deny", reasonCode: "RULE_DENY" },
      { ...one, decidingRule: undefined },
      { ...one, impliedTraits: [{ trait: "role:other", via }] },
      { ...one, impliedTraits: [{ trait: "role:staff", via }] },
    ];
    for (let pass = 0; pass < 2; pass++) {
      for (const d of variants) {
        expect(bytes(encodeEvaluateResponse(d))).toEqual(
          bytes(toBinary(EvaluateResponseSchema, decisionMessage(d))),
        );
      }
    }
  });

  it("writes the engine's own answers as protobuf-es does", () => {
    const engine = compilePolicy(defaultPolicy, createTraitRegistry());
    const requests = [
      { traits: ["role:admin"], context: "USER_ACTION" },
      { traits: ["role:viewer"], context: "USER_ACTION", classifications: ["pii"] },
      { traits: ["role:clinician"], context: "DATA_EXPORT", classifications: ["phi"] },
      { traits: [], context: "SEARCH" },
    ];
    const list = engine.evaluateBatch(requests).map((d, k) => ({
      ...d,
      decisionId: `id-${k}`,
      impliedTraits: [],
    }));
    for (let pass = 0; pass < 2; pass++) {
      expect(bytes(encodeEvaluateBatchResponse(list))).toEqual(
        bytes(toBinary(EvaluateBatchResponseSchema, evaluateBatchResponse(list))),
      );
    }
  });

  it("is what the service hands the gRPC path for Evaluate and EvaluateBatch", async () => {
    const list = Object.values(answers);
    const decisions = {
      evaluate: async () => base,
      evaluateBatch: async () => list,
    } as unknown as PolicyDecisions;
    const service = createPolicyService({ decisions, admin: {} as PolicyAdmin });
    const values = createContextValues().set(principalKey, {
      kind: "service",
      userId: "svc",
      username: "svc",
      roles: ["service"],
      sessionId: "",
    });
    const ctx = { values } as unknown as HandlerContext;
    const one = await service.evaluate(create(EvaluateRequestSchema, { context: "X" }), ctx);
    const batch = await service.evaluateBatch(create(EvaluateBatchRequestSchema, {}), ctx);
    expectSame(
      presetResponseOf(one)?.binary?.() ?? new Uint8Array(),
      toBinary(EvaluateResponseSchema, decisionMessage(base)),
    );
    expectSame(
      presetResponseOf(batch)?.binary?.() ?? new Uint8Array(),
      toBinary(EvaluateBatchResponseSchema, evaluateBatchResponse(list)),
    );
  });
});
