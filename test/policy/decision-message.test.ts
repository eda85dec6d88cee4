import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  EvaluateBatchResponseSchema,
  EvaluateResponseSchema,
  RuleErrorSchema,
  SanitizeSpecSchema,
  TraitDerivationSchema,
} from "../../gen/traitgate/policy/v1/policy_pb.js";
import { decisionMessage, evaluateBatchResponse } from "../../src/policy/decision-message.js";
import type { DecisionAnswer } from "../../src/policy/decisions.js";
import { answerShapes as answers, base } from "./answers.js";

/** The message as the service built it before: an init object given to protobuf-es's create. */
function created(d: DecisionAnswer) {
  return create(EvaluateResponseSchema, {
    decision: d.decision,
    reasonCode: d.reasonCode,
    reason: d.reason,
    ...(d.decidingRule ? { decidingRule: d.decidingRule } : {}),
    matchedRules: [...d.matchedRules],
    ...(d.sanitize
      ? {
          sanitize: {
            fields: [...d.sanitize.fields],
            classifications: [...d.sanitize.classifications],
          },
        }
      : {}),
    errors: (d.errors ?? []).map((e) => ({ ruleId: e.ruleId, message: e.message })),
    policyVersion: d.policyVersion,
    decisionId: d.decisionId,
    impliedTraits: d.impliedTraits.map((t) => ({ trait: t.trait, via: [...t.via] })),
  });
}

describe("decision messages", () => {
  it.each(Object.entries(answers))("builds the message create() builds: %s", (_, d) => {
    const message = decisionMessage(d);
    expect(message).toStrictEqual(created(d));
    // create() takes it as it is: no copy on the way out of the handler.
    expect(create(EvaluateResponseSchema, message)).toBe(message);
  });

  it.each(Object.entries(answers))("encodes as the message create() builds: %s", (_, d) => {
    expect(Buffer.from(toBinary(EvaluateResponseSchema, decisionMessage(d)))).toEqual(
      Buffer.from(toBinary(EvaluateResponseSchema, created(d))),
    );
  });

  it("builds a batch's message as create() does", () => {
    const list = [...Object.values(answers), ...Array.from({ length: 60 }, () => base)];
    const message = evaluateBatchResponse(list);
    const want = create(EvaluateBatchResponseSchema, { decisions: list.map(created) });
    expect(message).toStrictEqual(want);
    expect(create(EvaluateBatchResponseSchema, message)).toBe(message);
    expect(Buffer.from(toBinary(EvaluateBatchResponseSchema, message))).toEqual(
      Buffer.from(toBinary(EvaluateBatchResponseSchema, want)),
    );
  });

  it("builds a batch's decisions when they are first read, once (gRPC never reads them)", () => {
    let reads = 0;
    const counted = {
      ...base,
      get decision() {
        reads++;
        return "allow" as const;
      },
    };
    const message = evaluateBatchResponse([counted, counted]);
    expect(reads).toBe(0);
    expect(message.decisions).toHaveLength(2);
    expect(reads).toBe(2);
    expect(message.decisions).toBe(message.decisions);
    expect(reads).toBe(2);
    // Set like any message's field.
    message.decisions = [];
    expect(message.decisions).toEqual([]);
  });

  it("knows every field of the messages it builds (a field added to the proto fails here)", () => {
    const fields = (schema: { fields: readonly { number: number; name: string }[] }) =>
      schema.fields.map((f) => `${f.number}:${f.name}`);
    expect(fields(EvaluateResponseSchema)).toEqual([
      "1:decision",
      "2:reason_code",
      "3:reason",
      "4:deciding_rule",
      "5:matched_rules",
      "6:sanitize",
      "7:errors",
      "8:policy_version",
      "9:decision_id",
      "10:implied_traits",
    ]);
    expect(fields(SanitizeSpecSchema)).toEqual(["1:fields", "2:classifications"]);
    expect(fields(RuleErrorSchema)).toEqual(["1:rule_id", "2:message"]);
    expect(fields(TraitDerivationSchema)).toEqual(["1:trait", "2:via"]);
    expect(fields(EvaluateBatchResponseSchema)).toEqual(["1:decisions"]);
  });
});
