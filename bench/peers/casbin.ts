import { newEnforcer, newModelFromString, StringAdapter } from "casbin";
import { type Engine, juniorRoles, roleCount, type Workload } from "../policy-workload.js";

/** Casbin (`casbin`): RBAC with role inheritance `g` and the deny-override effect. */
const casbinModel = `
[request_definition]
r = sub, obj, act
[policy_definition]
p = sub, obj, act, eft
[role_definition]
g = _, _
[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))
[matchers]
m = g(r.sub, p.sub) && r.obj == p.obj && r.act == p.act
`;

export async function casbinEngine(w: Workload): Promise<Engine> {
  const lines = [
    ...w.doc.rules.map((rule) => {
      const [role, cap, cls] = rule.when.all!.map((t) => t.slice(t.indexOf(":") + 1));
      return `p, ${role}, ${cls}, ${cap}, ${rule.decision}`;
    }),
    ...Array.from({ length: roleCount }, (_, i) =>
      juniorRoles(i).map((j) => `g, r${i}, r${j}`),
    ).flat(),
    ...w.users.flatMap((roles, u) => roles.map((r) => `g, u${u}, r${r}`)),
  ];
  const enforcer = await newEnforcer(
    newModelFromString(casbinModel),
    new StringAdapter(lines.join("\n")),
  );
  const args = w.requests.map(([u, cap, cls]) => [`u${u}`, `d${cls}`, `c${cap}`]);
  return { name: "casbin", decide: (i) => enforcer.enforceSync(...args[i]!) };
}
