import type { JsonObject } from "@bufbuild/protobuf";
import { useState } from "preact/hooks";
import { type ExplainResponse, PolicyService } from "../../../gen/traitgate/policy/v1/policy_pb.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ErrorBox, Field, fieldError } from "../ui.js";

const contexts = ["USER_ACTION", "SEARCH", "DATA_EXPORT", "PLUGIN_INTERACTION", "UI_RENDER"];
const list = (t: string) => t.split(/[\s,]+/).filter(Boolean);

/** Evaluates a request with the active policy and shows Explain: the rules and derivations. */
export function Playground() {
  const [context, setContext] = useState("SEARCH");
  const [traits, setTraits] = useState("role:clinician, compliance:hipaa");
  const [classes, setClasses] = useState("phi");
  const [resource, setResource] = useState("");
  const [answer, setAnswer] = useState<ExplainResponse | undefined>();
  const [error, setError] = useState<ShownError | undefined>();
  return (
    <section aria-labelledby="playground-title">
      <h2 id="playground-title">Playground</h2>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setError(undefined);
          setAnswer(undefined);
          try {
            const res = resource.trim() === "" ? undefined : (JSON.parse(resource) as JsonObject);
            setAnswer(
              await client(PolicyService).explain({
                context,
                traits: list(traits),
                classifications: list(classes),
                ...(res ? { resource: res } : {}),
              }),
            );
          } catch (err) {
            setError(
              err instanceof SyntaxError
                ? {
                    message: "The resource is not JSON.",
                    reason: "RESOURCE_JSON",
                    field: "resource",
                    code: "",
                  }
                : shownError(err),
            );
          }
        }}
      >
        <div class="field">
          <label for="pg-context">Context</label>
          <select
            id="pg-context"
            value={context}
            onChange={(e) => setContext((e.currentTarget as HTMLSelectElement).value)}
          >
            {contexts.map((c) => (
              <option key={c} value={c}>
                {c}
              </option>
            ))}
          </select>
        </div>
        <Field
          id="pg-traits"
          label="Traits"
          value={traits}
          onInput={setTraits}
          error={error?.field.startsWith("traits") ? error.message : undefined}
        />
        <Field
          id="pg-classes"
          label="Classifications"
          value={classes}
          onInput={setClasses}
          error={error?.field.startsWith("classifications") ? error.message : undefined}
        />
        <Field
          id="pg-resource"
          label="Resource (JSON, optional)"
          value={resource}
          onInput={setResource}
          error={fieldError(error, "resource")}
        />
        {error &&
        !["resource"].includes(error.field) &&
        !error.field.startsWith("traits") &&
        !error.field.startsWith("classifications") ? (
          <ErrorBox error={error} />
        ) : null}
        <button type="submit">Explain</button>
      </form>
      {answer?.decision ? (
        <div role="status">
          <p>
            Decision:{" "}
            <strong class={`decision-${answer.decision.decision}`}>
              {answer.decision.decision}
            </strong>{" "}
            by <code>{answer.decision.decidingRule || "(default)"}</code>: {answer.decision.reason}
          </p>
          {answer.impliedTraits.length > 0 ? (
            <details>
              <summary>Trait derivations ({answer.impliedTraits.length})</summary>
              <ul>
                {answer.impliedTraits.map((d) => (
                  <li key={d.trait}>
                    <code>{d.trait}</code> via {d.via.join(" → ")}
                  </li>
                ))}
              </ul>
            </details>
          ) : null}
          <table>
            <thead>
              <tr>
                <th scope="col">Rule</th>
                <th scope="col">Decision</th>
                <th scope="col">Matched</th>
                <th scope="col">Why not</th>
              </tr>
            </thead>
            <tbody>
              {answer.rules
                .filter((r) => r.inContext)
                .map((r) => (
                  <tr key={r.id} class={r.matched ? "matched" : undefined}>
                    <td>{r.id}</td>
                    <td>{r.decision}</td>
                    <td>{r.matched ? "yes" : "no"}</td>
                    <td>
                      {[
                        r.missing.length > 0 ? `missing ${r.missing.join(", ")}` : "",
                        r.anyHeld === false ? "none of its 'any' traits" : "",
                        r.excludedHeld.length > 0
                          ? `holds excluded ${r.excludedHeld.join(", ")}`
                          : "",
                        r.condition && r.condition !== "true" && !r.matched
                          ? `condition ${r.condition}`
                          : "",
                      ]
                        .filter(Boolean)
                        .join("; ")}
                    </td>
                  </tr>
                ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
