import { randomUUID } from "node:crypto";
import {
  type AuditEventInput,
  type AuditWriter,
  batchDecisionId,
  createDecisionRecorder,
  type DecisionInputs,
  type DecisionOutcome,
  decisionAction,
  decisionBatchAction,
  type RequestOrigin,
} from "../audit/index.js";
import { permissionDenied } from "../errors.js";
import { derivationsUsed } from "./derivation.js";
import type { PolicyEngine } from "./engine.js";
import type { Explanation, TraitDerivation } from "./explain.js";
import type { LivePolicy } from "./live.js";
import type { Removal } from "./sanitize.js";
import type { CompleteEvaluationRequest, Decision, EvaluationRequest } from "./types.js";

/** The authenticated caller of a decision method. */
export interface DecisionCaller {
  kind: "user" | "service";
  userId: string;
  roles: readonly string[];
  /** Where the request came from, for the decision's record. */
  origin?: RequestOrigin | undefined;
}

/** A decision as answered: the engine's, its audit id, and the derivations it used. */
export interface DecisionAnswer extends Decision {
  decisionId: string;
  impliedTraits: TraitDerivation[];
}

export interface SanitizeAnswer {
  decision: DecisionAnswer;
  /** The document as the decision allows it; undefined on deny. */
  document: unknown;
  removed: Removal[];
}

export interface PolicyDecisions {
  evaluate(
    caller: DecisionCaller,
    requestId: string | undefined,
    request: EvaluationRequest,
  ): Promise<DecisionAnswer>;
  evaluateBatch(
    caller: DecisionCaller,
    requestId: string | undefined,
    requests: readonly EvaluationRequest[],
  ): Promise<DecisionAnswer[]>;
  explain(
    caller: DecisionCaller,
    requestId: string | undefined,
    request: EvaluationRequest,
  ): Promise<{ decision: DecisionAnswer; explanation: Explanation }>;
  uiFeatures(traits: readonly string[]): { features: string[]; policyVersion: string };
  sanitize(
    caller: DecisionCaller,
    requestId: string | undefined,
    request: EvaluationRequest,
    document: unknown,
  ): Promise<SanitizeAnswer>;
}

const userIdField = () => "user_id";

/** Roles that may ask for decisions about any user (enforcement points acting for users). */
export const decideForOthersRoles: readonly string[] = ["admin", "service"];

/**
 * Decisions with a durable record: each one is committed to the audit log (through the
 * shared group-committing writer) before it is answered, with a decision id the answer
 * carries. When the audit log cannot be written the writer's `unavailable` error
 * (AUDIT_UNAVAILABLE, HTTP 503) is the answer: no decision leaves unrecorded.
 *
 * The record holds the caller, the subject user, the given traits and data classes, the
 * context, the decision, reason code, deciding and matched rules, errors and the policy
 * version; of the resource only its attribute names, and never a document.
 */
export function createPolicyDecisions(deps: {
  live: LivePolicy;
  audit: Pick<AuditWriter, "write">;
  /**
   * Told of decisions once they are recorded, i.e. answered (metrics): `count` answers like
   * `decision` (its decision and reason code), consecutive in a batch.
   */
  onDecision?: (decision: Decision, count: number) => void;
}): PolicyDecisions {
  const { live, audit } = deps;
  const answered = deps.onDecision ?? (() => {});

  /**
   * The user a decision is about. A user asks about themselves; service accounts and users
   * with an admin or service role may name anyone. Otherwise a user could write decisions
   * about someone else into the audit log (and probe the policy on their behalf).
   */
  function subject(
    caller: DecisionCaller,
    userId: string | undefined,
    field: () => string,
  ): string {
    const wanted = userId ?? "";
    if (wanted === "") return caller.kind === "user" ? caller.userId : "";
    if (
      wanted !== caller.userId &&
      caller.kind === "user" &&
      !caller.roles.some((r) => decideForOthersRoles.includes(r))
    ) {
      const name = field();
      throw permissionDenied(
        "USER_MISMATCH",
        "a user may ask for decisions about themselves only (roles admin or service may name others)",
        { field: name, metadata: { field: name } },
      );
    }
    return wanted;
  }

  // Compact records (src/audit/decision-record.ts): each distinct inputs and outcome is
  // encoded and hashed once per process, and stored once.
  const recorder = createDecisionRecorder();

  // The engine's fixed answers (one matched rule, none) are frozen and shared, their lists
  // too: their outcome is built once, frozen, and the recorder keeps its value by identity.
  const outcomes = new WeakMap<Decision, DecisionOutcome>();
  const outcomeOf = (d: Decision): DecisionOutcome => {
    if (!isFixed(d)) return decisionOutcome(d);
    let outcome = outcomes.get(d);
    if (outcome === undefined) {
      outcome = Object.freeze(decisionOutcome(d));
      outcomes.set(d, outcome);
    }
    return outcome;
  };

  const record = (
    caller: DecisionCaller,
    requestId: string | undefined,
    via: string,
    request: EvaluationRequest,
    d: Decision,
    decisionId: string,
    extra: Record<string, number> = {},
  ): AuditEventInput => ({
    id: decisionId,
    actorType: caller.kind,
    actorId: caller.userId,
    action: decisionAction,
    target: request.userId ? `user:${request.userId}` : null,
    outcome: d.decision === "deny" ? "denied" : "success",
    requestId: requestId ?? null,
    origin: caller.origin ?? null,
    ...recorder.unary(via, decisionInputs(request), outcomeOf(d), extra),
  });

  // Literals with every field (no spread: 0.5 µs a copy, per decision of a batch).
  const answer = (
    engine: PolicyEngine,
    request: EvaluationRequest,
    d: Decision,
    id: string,
  ): DecisionAnswer => ({
    decision: d.decision,
    reasonCode: d.reasonCode,
    reason: d.reason,
    decidingRule: d.decidingRule,
    matchedRules: d.matchedRules,
    sanitize: d.sanitize,
    errors: d.errors,
    policyVersion: d.policyVersion,
    decisionId: id,
    impliedTraits: derivationsUsed(engine, request, d),
  });

  // An absent user id and "" mean the same everywhere (record, conditions): no copy for it.
  // `field` names the request's user id in an error only: a batch builds no name per request.
  const withSubject = (
    caller: DecisionCaller,
    request: EvaluationRequest,
    field: () => string = userIdField,
  ) => {
    const userId = subject(caller, request.userId, field);
    if (userId === (request.userId ?? "")) return request;
    const copy: CompleteEvaluationRequest = {
      traits: request.traits,
      context: request.context,
      classifications: request.classifications,
      userId,
      resource: request.resource,
    };
    return copy;
  };

  return {
    async evaluate(caller, requestId, input) {
      const request = withSubject(caller, input);
      const engine = live.current();
      const d = engine.evaluate(request);
      const id = randomUUID();
      await audit.write(record(caller, requestId, "evaluate", request, d, id));
      answered(d, 1);
      return answer(engine, request, d, id);
    },

    async evaluateBatch(caller, requestId, inputs) {
      const requests = inputs.map((r, i) => withSubject(caller, r, () => `requests[${i}].user_id`));
      const engine = live.current();
      const decisions = engine.evaluateBatch(requests);
      const eventId = randomUUID();
      const ids = decisions.map((_, k) => batchDecisionId(eventId, k));
      // One event holds the batch's decisions, each with its id: one row and one hash per
      // batch keeps a batch's cost near one decision's (the writer group-commits the rest).
      await audit.write({
        id: eventId,
        actorType: caller.kind,
        actorId: caller.userId,
        action: decisionBatchAction,
        target: null,
        outcome: decisions.some((d) => d.decision === "deny") ? "denied" : "success",
        requestId: requestId ?? null,
        origin: caller.origin ?? null,
        ...recorder.batch(
          decisions.map((d, i) => ({
            inputs: decisionInputs(requests[i]!),
            outcome: outcomeOf(d),
          })),
        ),
      });
      // Told once per run of answers alike (metrics count them), not once per decision.
      let run = 0;
      for (let k = 0; k < decisions.length; k++) {
        const d = decisions[k]!;
        const next = decisions[k + 1];
        run++;
        if (next?.decision !== d.decision || next.reasonCode !== d.reasonCode) {
          answered(d, run);
          run = 0;
        }
      }
      return decisions.map((d, i) => answer(engine, requests[i]!, d, ids[i]!));
    },

    async explain(caller, requestId, input) {
      const request = withSubject(caller, input);
      const engine = live.current();
      const explanation = engine.explain(request);
      const id = randomUUID();
      await audit.write(record(caller, requestId, "explain", request, explanation.decision, id));
      answered(explanation.decision, 1);
      return { decision: answer(engine, request, explanation.decision, id), explanation };
    },

    uiFeatures(traits) {
      const engine = live.current();
      return { features: engine.uiFeatures(traits), policyVersion: engine.version };
    },

    async sanitize(caller, requestId, input, document) {
      const request = withSubject(caller, input);
      const engine = live.current();
      const d = engine.evaluate(request);
      const id = randomUUID();
      const result =
        d.decision === "sanitize" && d.sanitize !== undefined
          ? engine.sanitize(document, d.sanitize)
          : { document: d.decision === "allow" ? document : undefined, removed: [] };
      // Counts only: paths and values of the document stay out of the audit log.
      await audit.write(
        record(caller, requestId, "sanitize", request, d, id, {
          removed_fields: result.removed.filter((r) => r.kind === "field").length,
          redacted_patterns: result.removed
            .filter((r) => r.kind === "pattern")
            .reduce((n, r) => n + (r.count ?? 1), 0),
        }),
      );
      answered(d, 1);
      return { decision: answer(engine, request, d, id), ...result };
    },
  };
}

/** What the audit log keeps of a decision's request: never a document, of the resource its keys. */
function decisionInputs(request: EvaluationRequest): DecisionInputs {
  const names = request.resource ? Object.keys(request.resource) : undefined;
  return {
    userId: request.userId ?? "",
    traits: request.traits,
    classifications: request.classifications ?? noClassifications,
    context: request.context,
    resourceAttributes:
      names === undefined || names.length <= maxRecordedAttributes
        ? names
        : names.slice(0, maxRecordedAttributes),
    resourceAttributeCount:
      names !== undefined && names.length > maxRecordedAttributes ? names.length : undefined,
  };
}

const noClassifications: readonly string[] = Object.freeze([]);

/** Frozen, with frozen lists: nothing an outcome is built from can change. */
const isFixed = (d: Decision): boolean =>
  Object.isFrozen(d) &&
  Object.isFrozen(d.matchedRules) &&
  (d.errors === undefined || Object.isFrozen(d.errors));

function decisionOutcome(d: Decision): DecisionOutcome {
  return {
    policyVersion: d.policyVersion,
    decision: d.decision,
    reasonCode: d.reasonCode,
    decidingRule: d.decidingRule ?? null,
    matchedRules: d.matchedRules,
    ...(d.errors ? { errors: d.errors } : {}),
  };
}

/** Of the resource, the names of at most this many attributes are recorded (and the count). */
const maxRecordedAttributes = 64;
