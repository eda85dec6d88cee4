import type { AuditWriter } from "../audit/index.js";
import type { Logger } from "../log.js";
import type { Database } from "../storage/index.js";
import { defaultPolicy } from "./default-policy.js";
import { compilePolicy, type PolicyEngine } from "./engine.js";
import type { LoadedPolicy } from "./live.js";
import { policyInvalid } from "./policy-errors.js";
import { policyStore } from "./policy-store.js";
import { createTraitRegistry, type TraitRegistry } from "./registry.js";
import type { PolicyDocument } from "./types.js";
import { validatePolicy } from "./validate.js";

/**
 * A document checked for activation against a registry: every issue refuses it (unknown
 * traits, structure, rules that never match, shadowed rules), then it is compiled.
 */
export function compileForActivation(document: unknown, registry: TraitRegistry): PolicyEngine {
  const issues = validatePolicy(document, registry);
  if (issues.length > 0) throw policyInvalid(issues, document);
  return compilePolicy(document as PolicyDocument, registry);
}

/** Reads the active version and the registry, in one statement, and compiles them. */
export async function loadActivePolicy(db: Database): Promise<LoadedPolicy> {
  const snapshot = await policyStore.snapshot(db);
  if (snapshot.document === undefined) {
    throw new Error("no policy version is active (the shipped policy is activated at start)");
  }
  const registry = createTraitRegistry(snapshot.traits);
  // Validated when it was activated: compile only (a registry change re-validates it too).
  return {
    generation: snapshot.generation,
    engine: compilePolicy(snapshot.document, registry),
  };
}

/**
 * First start: stores and activates the shipped policy (src/policy/default-policy.ts) when
 * no version is active. Concurrent starts race on the locked state row: one activates.
 */
export async function ensureActivePolicy(deps: {
  db: Database;
  audit: Pick<AuditWriter, "writeIn">;
  log: Logger;
}): Promise<void> {
  const activated = await deps.db.transaction(async (tx) => {
    const state = await policyStore.lockState(tx);
    if (state.activeVersion !== undefined) return undefined;
    const snapshot = await policyStore.snapshot(tx);
    const engine = compileForActivation(defaultPolicy, createTraitRegistry(snapshot.traits));
    const by = { username: "system", userId: null, requestId: null };
    await policyStore.putVersion(tx, engine.version, defaultPolicy, "shipped default policy", by);
    const generation = await policyStore.activate(tx, engine.version, undefined, by);
    await policyStore.notify(tx, generation);
    // With the activation, or not at all.
    await deps.audit.writeIn(tx, {
      actorType: "system",
      action: "policy_activate",
      target: `policy:${engine.version}`,
      outcome: "success",
      details: {
        before: null,
        after: engine.version,
        reason: "first start: shipped default policy",
      },
    });
    return engine.version;
  });
  if (activated === undefined) return;
  deps.log.info({ version: activated }, "shipped default policy activated");
}
