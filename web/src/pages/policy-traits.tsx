import type { Trait } from "../../../gen/traitgate/policy/v1/policy_pb.js";
import { PolicyService } from "../../../gen/traitgate/policy/v1/policy_pb.js";
import { useLoad } from "../load.js";
import { client } from "../rpc.js";
import { ErrorBox, Loading } from "../ui.js";

/** The trait registry by category, each trait with what it implies, as a tree. */
export function TraitTree() {
  const [state] = useLoad(() => client(PolicyService).listTraits({}));
  return (
    <section aria-labelledby="traits-title">
      <h2 id="traits-title">Trait registry</h2>
      {state.kind === "loading" ? <Loading what="traits" /> : null}
      {state.kind === "error" ? <ErrorBox error={state.error} /> : null}
      {state.kind === "ready" ? <Categories traits={state.data.traits} /> : null}
    </section>
  );
}

function Categories({ traits }: { traits: Trait[] }) {
  const byName = new Map(traits.map((t) => [t.name, t]));
  const categories = [...new Set(traits.map((t) => t.category))].sort();
  return (
    <div class="traits">
      {categories.map((c) => (
        <details key={c}>
          <summary>
            {c} ({traits.filter((t) => t.category === c).length})
          </summary>
          <ul>
            {traits
              .filter((t) => t.category === c)
              .map((t) => (
                <Node key={t.name} trait={t} byName={byName} seen={new Set()} />
              ))}
          </ul>
        </details>
      ))}
    </div>
  );
}

function Node(props: { trait: Trait; byName: Map<string, Trait>; seen: Set<string> }) {
  const t = props.trait;
  const seen = new Set(props.seen).add(t.name);
  return (
    <li>
      <code>{t.name}</code> {t.builtin ? null : <span class="badge">registered</span>}{" "}
      <span class="hint">{t.description}</span>
      {t.conflicts.length > 0 ? (
        <span class="hint"> conflicts with {t.conflicts.join(", ")}</span>
      ) : null}
      {t.implies.length > 0 ? (
        <ul>
          {t.implies.map((name) => {
            const child = props.byName.get(name);
            return child && !seen.has(name) ? (
              <Node key={name} trait={child} byName={props.byName} seen={seen} />
            ) : (
              <li key={name}>
                <code>{name}</code>
              </li>
            );
          })}
        </ul>
      ) : null}
    </li>
  );
}
