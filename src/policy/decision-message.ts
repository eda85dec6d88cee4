import type { MessageShape } from "@bufbuild/protobuf";
import type {
  EvaluateBatchResponseSchema,
  EvaluateResponseSchema,
} from "../../gen/traitgate/policy/v1/policy_pb.js";
import type { DecisionAnswer } from "./decisions.js";
import type { TraitDerivation } from "./explain.js";

/**
 * A decision's answer as its message (`EvaluateResponse`), built whole: every field as
 * protobuf-es's `create` would set it, so that `create` (which the handler's result passes
 * through) takes it as it is instead of copying every field and nested message again. That
 * copy cost about 75 µs per batch of 50 decisions (a micro-benchmark), 4 % of the batch's
 * server CPU. test/policy/decision-message.test.ts compares with `create` field by field, so a
 * field added to the proto and not here fails it.
 *
 * Tried and dropped: writing the protobuf binary by hand (each distinct string's bytes kept,
 * copied into one buffer). It took 115–140 µs per batch of 50 against protobuf-es's 107–118.
 */

type EvaluateResponse = MessageShape<typeof EvaluateResponseSchema>;
type EvaluateBatchResponse = MessageShape<typeof EvaluateBatchResponseSchema>;

/**
 * The answer as its message, complete. Its lists are the decision's own, taken as they are:
 * the engine's shared ones are frozen, so code that would change a response message in place
 * (none does: they are only encoded) must copy them first.
 */
export function decisionMessage(d: DecisionAnswer): EvaluateResponse {
  const message: EvaluateResponse = {
    $typeName: "traitgate.policy.v1.EvaluateResponse",
    decision: d.decision,
    reasonCode: d.reasonCode,
    reason: d.reason,
    matchedRules: d.matchedRules as string[],
    errors:
      d.errors === undefined || d.errors.length === 0
        ? []
        : d.errors.map((e) => ({
            $typeName: "traitgate.policy.v1.RuleError",
            ruleId: e.ruleId,
            message: e.message,
          })),
    policyVersion: d.policyVersion,
    decisionId: d.decisionId,
    impliedTraits: d.impliedTraits.map(derivationMessage),
  };
  if (d.decidingRule) message.decidingRule = d.decidingRule;
  if (d.sanitize) {
    message.sanitize = {
      $typeName: "traitgate.policy.v1.SanitizeSpec",
      fields: d.sanitize.fields as string[],
      classifications: d.sanitize.classifications as string[],
    };
  }
  return message;
}

/**
 * A derivation as its message. Its `via` list is shared between answers (frozen): the message
 * takes it as it is since it is only encoded, never changed.
 */
export const derivationMessage = (
  t: TraitDerivation,
): EvaluateResponse["impliedTraits"][number] => ({
  $typeName: "traitgate.policy.v1.TraitDerivation",
  trait: t.trait,
  via: t.via as string[],
});

/**
 * `EvaluateBatchResponse` for a batch's decisions, complete, its `decisions` built when first
 * read. The gRPC path sends the answers' binary (src/policy/decision-binary.ts) and never reads
 * them: 50 messages a batch not built. Reading them (Connect, gRPC-Web, REST, in process)
 * builds them once; setting them replaces them, as on any message.
 */
export function evaluateBatchResponse(answers: readonly DecisionAnswer[]): EvaluateBatchResponse {
  let decisions: EvaluateResponse[] | undefined;
  return {
    $typeName: "traitgate.policy.v1.EvaluateBatchResponse",
    get decisions() {
      decisions ??= answers.map(decisionMessage);
      return decisions;
    },
    set decisions(value: EvaluateResponse[]) {
      decisions = value;
    },
  };
}
