import * as cedar from "@cedar-policy/cedar-wasm/nodejs";
import { type Engine, juniorRoles, type Workload } from "../policy-workload.js";

/**
 * Cedar (`@cedar-policy/cedar-wasm`), the stateful API with the policy set preparsed once;
 * each request carries only its entity slice (the user and the roles it reaches).
 */
export function cedarEngine(w: Workload): Engine {
  const text = w.doc.rules
    .map((rule) => {
      const [role, cap, cls] = rule.when.all!.map((t) => t.slice(t.indexOf(":") + 1));
      const effect = rule.decision === "deny" ? "forbid" : "permit";
      return `${effect}(principal in Role::"${role}", action == Action::"${cap}", resource == Data::"${cls}");`;
    })
    .join("\n");
  const setId = `bench-${w.doc.rules.length}`;
  const parsed = cedar.preparsePolicySet(setId, { staticPolicies: text });
  if (parsed.type !== "success") throw new Error(`cedar: ${JSON.stringify(parsed.errors[0])}`);
  const roleEntity = (i: number): cedar.EntityJson => ({
    uid: { type: "Role", id: `r${i}` },
    attrs: {},
    parents: juniorRoles(i).map((j) => ({ type: "Role", id: `r${j}` })),
  });
  // Each request carries its own entity slice: the user and the roles it reaches.
  const slices = w.users.map((roles, u): cedar.EntityJson[] => {
    const reach = new Set<number>();
    const visit = (r: number) => {
      if (reach.has(r)) return;
      reach.add(r);
      for (const j of juniorRoles(r)) visit(j);
    };
    for (const r of roles) visit(r);
    return [
      {
        uid: { type: "User", id: `u${u}` },
        attrs: {},
        parents: roles.map((r) => ({ type: "Role", id: `r${r}` })),
      },
      ...[...reach].map(roleEntity),
    ];
  });
  const calls: cedar.StatefulAuthorizationCall[] = w.requests.map(([u, cap, cls]) => ({
    principal: { type: "User", id: `u${u}` },
    action: { type: "Action", id: `c${cap}` },
    resource: { type: "Data", id: `d${cls}` },
    context: {},
    preparsedPolicySetId: setId,
    entities: slices[u]!,
  }));
  return {
    name: "cedar-wasm",
    decide: (i) => {
      const answer = cedar.statefulIsAuthorized(calls[i]!);
      if (answer.type !== "success") throw new Error(`cedar: ${JSON.stringify(answer.errors[0])}`);
      return answer.response.decision === "allow";
    },
  };
}
