import { CanonicalDetails, canonicalJson } from "./canonical.js";
import type { JsonObject, JsonValue } from "./details.js";
import { createTokenTrie } from "./token-trie.js";
import { type AuditValue, createValueInterner, referencedValues } from "./values.js";

/**
 * The compact record of policy decisions (docs/audit.md, "Compact decision records"). A
 * decision is two values written once each in audit_values and named by ref in the event:
 * its inputs (subject, traits, data classes, context, resource attribute names) and its
 * outcome (policy version, decision, reason code, deciding and matched rules, errors).
 * Principals ask with the same traits again and again, and a policy version has few distinct
 * outcomes, so an event holds two refs per decision instead of the values:
 *
 * - `policy_decision`: `{via, refs: [inputs, outcome], …counts}`; the decision id is the
 *   event's id.
 * - `policy_decision_batch`: `{count, refs: [distinct refs], decisions: [[i, o], …]}`, i and
 *   o indexes into refs; decision k's id is the event's id with its last four hex digits
 *   replaced by k (a batch holds at most 65,536; the API allows 1,000).
 *
 * The audit API, `traitgate audit export` and the console read events through
 * expandDecisionDetails, which gives the full form back (the form events written before
 * this one have).
 */

export const decisionAction = "policy_decision";
export const decisionBatchAction = "policy_decision_batch";

/** What a decision was asked, as the record keeps it. */
export interface DecisionInputs {
  userId: string;
  traits: readonly string[];
  classifications: readonly string[];
  context: string;
  /** Of the resource only its attribute names (at most 64, with the count beyond that). */
  resourceAttributes?: readonly string[] | undefined;
  resourceAttributeCount?: number | undefined;
}

/** What was decided, as the record keeps it. */
export interface DecisionOutcome {
  policyVersion: string;
  decision: string;
  reasonCode: string;
  decidingRule: string | null;
  matchedRules: readonly string[];
  errors?: unknown;
}

/** Frozen, with frozen lists: an outcome whose value can be kept by its identity. */
const isFixed = (o: DecisionOutcome): boolean =>
  Object.isFrozen(o) &&
  Object.isFrozen(o.matchedRules) &&
  (o.errors === undefined || Object.isFrozen(o.errors));

/** The mark that ends a list in an inputs key after its shape mark (src/audit/token-trie.ts). */
const endOfList = 0;

/** The id of decision k of the batch event `eventId`. */
export function batchDecisionId(eventId: string, k: number): string {
  if (!Number.isInteger(k) || k < 0 || k > 0xffff) throw new RangeError("batch index out of range");
  return eventId.slice(0, 32) + k.toString(16).padStart(4, "0");
}

export interface DecisionRecorder {
  /**
   * Details and values of a `policy_decision` event. An outcome passed frozen (with frozen
   * lists) is taken never to change: its value is kept by the object's identity.
   */
  unary(
    via: string,
    inputs: DecisionInputs,
    outcome: DecisionOutcome,
    extra?: Readonly<Record<string, number>>,
  ): { canonicalDetails: CanonicalDetails; values: AuditValue[] };
  /** Details and values of a `policy_decision_batch` event. */
  batch(decisions: readonly { inputs: DecisionInputs; outcome: DecisionOutcome }[]): {
    canonicalDetails: CanonicalDetails;
    values: AuditValue[];
  };
}

/**
 * Builds compact decision records, interning each distinct inputs and outcome once per
 * process (its JSON and hash computed once, not per decision).
 */
export function createDecisionRecorder(maxInterned?: number): DecisionRecorder {
  const interner = createValueInterner(maxInterned);
  // Inputs are found by walking their fields (src/audit/token-trie.ts); the first time a path
  // is walked, by their JSON in the interner (which outlives a trie that started over).
  // At most as many values as the interner's generation, so the trie holds no more alive.
  const inputs = createTokenTrie<AuditValue>(
    maxInterned === undefined ? undefined : 8 * maxInterned,
    maxInterned,
  );
  const inputsValue = (i: DecisionInputs): AuditValue => {
    let node = inputs.child(inputs.child(inputs.root(), i.userId), i.context);
    for (const trait of i.traits) node = inputs.child(node, trait);
    // One mark tells which parts follow (0: none, the usual case), each list then ending
    // with its own mark: a walk reads back as one key only.
    const attributes = i.resourceAttributes;
    const count = i.resourceAttributeCount;
    const shape =
      (i.classifications.length > 0 ? 1 : 0) |
      (attributes !== undefined ? 2 : 0) |
      (count !== undefined ? 4 : 0);
    node = inputs.mark(node, shape);
    if (shape !== 0) {
      if (i.classifications.length > 0) {
        for (const name of i.classifications) node = inputs.child(node, name);
        node = inputs.mark(node, endOfList);
      }
      if (attributes !== undefined) {
        for (const name of attributes) node = inputs.child(node, name);
        node = inputs.mark(node, endOfList);
      }
      if (count !== undefined) node = inputs.child(node, String(count));
    }
    return node.value ?? inputs.keep(node, inputsByContent(i));
  };
  const inputsByContent = (i: DecisionInputs) =>
    interner.intern(
      JSON.stringify([
        "i",
        i.userId,
        i.traits,
        i.classifications,
        i.context,
        i.resourceAttributes ?? null,
        i.resourceAttributeCount ?? null,
      ]),
      () => ({
        user_id: i.userId,
        traits: i.traits,
        classifications: i.classifications,
        context: i.context,
        ...(i.resourceAttributes ? { resource_attributes: i.resourceAttributes } : {}),
        ...(i.resourceAttributeCount !== undefined
          ? { resource_attribute_count: i.resourceAttributeCount }
          : {}),
      }),
    );
  // A frozen outcome cannot change: its value is kept by identity, with no key to build.
  const frozenOutcomes = new WeakMap<DecisionOutcome, AuditValue>();
  const outcomeValue = (o: DecisionOutcome) => {
    if (!isFixed(o)) return outcomeByContent(o);
    let value = frozenOutcomes.get(o);
    if (value === undefined) {
      value = outcomeByContent(o);
      frozenOutcomes.set(o, value);
    }
    return value;
  };
  const outcomeByContent = (o: DecisionOutcome) =>
    interner.intern(
      JSON.stringify([
        "o",
        o.policyVersion,
        o.decision,
        o.reasonCode,
        o.decidingRule,
        o.matchedRules,
        o.errors ?? null,
      ]),
      () => ({
        policy_version: o.policyVersion,
        decision: o.decision,
        reason_code: o.reasonCode,
        deciding_rule: o.decidingRule,
        matched_rules: o.matchedRules,
        ...(o.errors !== undefined ? { errors: o.errors } : {}),
      }),
    );

  return {
    unary(via, inputs, outcome, extra = {}) {
      const i = inputsValue(inputs);
      const o = outcomeValue(outcome);
      // A name of this codebase's, two refs and counts: nothing to redact.
      const details = { via, refs: [i.ref, o.ref], ...extra };
      return {
        canonicalDetails: new CanonicalDetails(details, canonicalJson(details)),
        values: [i, o],
      };
    },
    batch(decisions) {
      const index = new Map<string, number>();
      const values: AuditValue[] = [];
      const at = (value: AuditValue) => {
        let n = index.get(value.ref);
        if (n === undefined) {
          n = values.length;
          index.set(value.ref, n);
          values.push(value);
        }
        return n;
      };
      const pairs = decisions.map((d) => [at(inputsValue(d.inputs)), at(outcomeValue(d.outcome))]);
      const refs = values.map((v) => v.ref);
      const details = { count: decisions.length, refs, decisions: pairs };
      // Its canonical JSON written out: keys in order, indexes and base64url refs (nothing to
      // escape or redact).
      const json = `{"count":${decisions.length},"decisions":[${pairs.map(([i, o]) => `[${i},${o}]`).join(",")}],"refs":${refs.length === 0 ? "[]" : `["${refs.join('","')}"]`}}`;
      return { canonicalDetails: new CanonicalDetails(details, json), values };
    },
  };
}

/** The refs a compact decision event names (none for any other event). */
export function decisionRefs(action: string, details: JsonObject): string[] {
  return action === decisionAction || action === decisionBatchAction
    ? referencedValues(details)
    : [];
}

const isObject = (v: JsonValue | undefined): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * A decision event's details in the full form: each decision with its id, inputs and outcome.
 * Other events, and decision events written in the full form, are returned as they are. A ref
 * with no value (`values` lacks it) leaves the event compact, with `unresolved_refs`.
 */
export function expandDecisionDetails(
  action: string,
  eventId: string,
  details: JsonObject,
  values: ReadonlyMap<string, JsonValue>,
): JsonObject {
  const refs = decisionRefs(action, details);
  if (refs.length === 0) return details;
  const missing = refs.filter((ref) => !isObject(values.get(ref)));
  if (missing.length > 0) return { ...details, unresolved_refs: missing };
  const resolved = refs.map((ref) => values.get(ref) as JsonObject);
  const { refs: _refs, decisions, ...rest } = details;
  if (action === decisionAction) {
    const [inputs, outcome] = resolved;
    return { ...rest, decision_id: eventId, ...inputs, ...outcome };
  }
  const list = Array.isArray(decisions) ? decisions : [];
  const expanded = list.map((pair, k): JsonObject => {
    const [i, o] = Array.isArray(pair) ? pair : [];
    return {
      decision_id: batchDecisionId(eventId, k),
      ...(resolved[Number(i)] ?? {}),
      ...(resolved[Number(o)] ?? {}),
    };
  });
  const version = expanded[0]?.policy_version;
  return {
    ...rest,
    ...(version !== undefined ? { policy_version: version } : {}),
    decisions: expanded,
  };
}
