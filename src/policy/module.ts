import { PolicyService } from "../../gen/traitgate/policy/v1/policy_pb.js";
import type { AuditWriter } from "../audit/index.js";
import type { Logger } from "../log.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Database } from "../storage/index.js";
import { createPolicyDecisions, type PolicyDecisions } from "./decisions.js";
import { ensureActivePolicy, loadActivePolicy } from "./lifecycle.js";
import { type LivePolicy, startLivePolicy } from "./live.js";
import { createPolicyAdmin, type PolicyAdmin } from "./policy-admin.js";
import { policyStore } from "./policy-store.js";
import { createPolicyService } from "./service.js";
import type { Decision } from "./types.js";

/** API key scopes of the policy area (src/apikeys/scopes.ts). */
export const policyReadScope = "policy:read";
export const policyWriteScope = "policy:write";

export interface PolicyModuleDeps {
  db: Database;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  log: Logger;
  /** Generation poll behind LISTEN/NOTIFY (default 1 s). */
  pollIntervalMs?: number;
  /** Told of decisions answered by the policy service: `count` like `decision` (metrics). */
  onDecision?: (decision: Decision, count: number) => void;
}

/**
 * The policy area as other areas use it, in process. `current()` is the active compiled
 * engine (src/policy/engine.ts): evaluate, explain, sanitize without a network hop or an
 * audit record of its own (the caller records what it enforces). The gateway decides
 * `PLUGIN_INTERACTION` decisions with it.
 */
export interface PolicyArea {
  /** The active compiled engine; replaced (never mutated) when a version is activated. */
  current: LivePolicy["current"];
  live: LivePolicy;
  decisions: PolicyDecisions;
  admin: PolicyAdmin;
  close(): Promise<void>;
}

const decisionMethods = new Set(["Evaluate", "EvaluateBatch", "ListUiFeatures", "Sanitize"]);
const writeMethods = new Set(["PutTrait", "DeleteTrait", "PutPolicy", "ActivatePolicy"]);

const anyCaller = requireAuth();
const read = requireAuth({ roles: ["admin", "auditor"], apiKeyScopes: [policyReadScope] });
const write = requireAuth({ roles: ["admin"], apiKeyScopes: [policyWriteScope] });
// Explain shows every rule of the policy, why it did or did not match: the policy's
// readers (admins, auditors, security officers), with a key that may read it.
const explain = requireAuth({
  roles: ["admin", "auditor", "security_officer"],
  apiKeyScopes: [policyReadScope],
});
const rule = (name: string): AuthRule =>
  name === "Explain"
    ? explain
    : decisionMethods.has(name)
      ? anyCaller
      : writeMethods.has(name)
        ? write
        : read;

/** How each method of PolicyService is protected (also read by the OpenAPI generator). */
export const policyAuthRules: ReadonlyMap<string, AuthRule> = new Map(
  PolicyService.methods.map((m) => [`${PolicyService.typeName}/${m.name}`, rule(m.name)]),
);

/**
 * Wires the policy area: the shipped policy is activated on first start, the active version
 * is compiled and kept current across processes. Decisions need any authenticated user or
 * service account; administration needs an API key as well: reads the role admin or auditor
 * and `policy:read`, changes the role admin and `policy:write`. Explain, which shows the whole
 * policy's reasoning, is a read: the role admin, auditor or security_officer and `policy:read`.
 */
export async function createPolicyModule(
  deps: PolicyModuleDeps,
): Promise<{ module: ServiceModule; area: PolicyArea }> {
  const log = deps.log.child({ area: "policy" });
  await ensureActivePolicy({ db: deps.db, audit: deps.audit, log });
  const live = await startLivePolicy({
    db: deps.db,
    load: () => loadActivePolicy(deps.db),
    generation: () => policyStore.generation(deps.db),
    log,
    ...(deps.pollIntervalMs ? { pollIntervalMs: deps.pollIntervalMs } : {}),
  });
  const decisions = createPolicyDecisions({
    live,
    audit: deps.audit,
    ...(deps.onDecision ? { onDecision: deps.onDecision } : {}),
  });
  const admin = createPolicyAdmin({ db: deps.db, audit: deps.audit, live });
  return {
    area: { current: () => live.current(), live, decisions, admin, close: () => live.close() },
    module: {
      services: [PolicyService],
      register: (router) =>
        router.service(PolicyService, createPolicyService({ decisions, admin })),
      authRules: policyAuthRules,
    },
  };
}

export { PolicyService };
