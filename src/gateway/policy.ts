import type { JsonObject } from "@bufbuild/protobuf";
import type { PolicyEngine, SanitizeSpec } from "../policy/index.js";
import type { PluginPolicy } from "./gateway.js";
import type { PluginManifest } from "./manifest.js";

/** The context of plugin-interaction decisions (docs/policy.md). */
export const pluginInteractionContext = "PLUGIN_INTERACTION";

/**
 * The gateway's policy check on the policy engine that is active now: the
 * target plugin's traits (`plugin_type:<type>` plus its manifest's traits) and
 * the payload's data classes, in context PLUGIN_INTERACTION. A plugin's trait
 * list is built once per manifest, not per call.
 */
export function enginePluginPolicy(current: () => PolicyEngine): PluginPolicy {
  const traitsOf = new WeakMap<PluginManifest, readonly string[]>();
  return {
    decide({ plugin, classifications }) {
      let traits = traitsOf.get(plugin);
      if (traits === undefined) {
        traits = [`plugin_type:${plugin.pluginType}`, ...plugin.traits];
        traitsOf.set(plugin, traits);
      }
      const engine = current();
      const decision = engine.evaluate({
        traits,
        context: pluginInteractionContext,
        classifications,
      });
      switch (decision.decision) {
        case "allow":
          return { decision: "allow" };
        case "deny":
          return { decision: "deny", reason: decision.reason };
        case "sanitize": {
          const spec = decision.sanitize ?? { fields: [], classifications };
          return {
            decision: "sanitize",
            apply: (payload) => sanitizePayload(engine, payload, spec),
          };
        }
      }
    },
  };
}

/**
 * A payload as a sanitize decision leaves it. A batch's documents (`documents[i]`,
 * rag_index_batch) are each sanitized as a payload of their own as well, so that a dotted path
 * anchored at a document (`chunks.content`) reaches `documents[i].chunks[j].content` as it
 * reaches a single document's `chunks[j].content`: sending documents in batches must not get
 * around a rule.
 */
function sanitizePayload(engine: PolicyEngine, payload: JsonObject, spec: SanitizeSpec) {
  const whole = engine.sanitize(payload, spec).document as JsonObject;
  const documents = whole.documents;
  if (!Array.isArray(documents)) return whole;
  return {
    ...whole,
    documents: documents.map((entry) =>
      entry !== null && typeof entry === "object" && !Array.isArray(entry)
        ? (engine.sanitize(entry, spec).document as JsonObject)
        : entry,
    ),
  };
}

/** The registry check for manifests: every trait a plugin declares must be registered. */
export function engineTraitCheck(current: () => PolicyEngine) {
  return (trait: string, field: string): void => {
    current().registry.resolve(trait, field);
  };
}
