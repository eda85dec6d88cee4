import { useState } from "preact/hooks";
import { OperatorAllowlistService } from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import { formatTime, useLoad } from "../load.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ConfirmButton } from "../shown-once.js";
import { Empty, ErrorBox, Field, fieldError, Loading } from "../ui.js";

/** The operator allowlist: caller × target × operations; add (or replace) and remove entries. */
export function Allowlist({ writable }: { writable: boolean }) {
  const allowlist = client(OperatorAllowlistService);
  const [list, reload] = useLoad(() => allowlist.listAllowlistEntries({}));
  const [caller, setCaller] = useState("");
  const [target, setTarget] = useState("");
  const [operations, setOperations] = useState("");
  const [error, setError] = useState<ShownError | undefined>();
  const act = async (fn: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await fn();
      reload();
      return true;
    } catch (err) {
      setError(shownError(err));
      return false;
    }
  };
  const fields = ["caller", "target", "operations"];
  return (
    <section aria-labelledby="allowlist-title">
      <h2 id="allowlist-title">Operator allowlist</h2>
      {writable ? (
        <form
          class="filters"
          onSubmit={async (e) => {
            e.preventDefault();
            const ops = operations.split(/[\s,]+/).filter(Boolean);
            if (await act(() => allowlist.putAllowlistEntry({ caller, target, operations: ops }))) {
              setCaller("");
              setTarget("");
              setOperations("");
            }
          }}
        >
          {error && !fields.includes(error.field.replace(/\[\d+\]$/, "")) ? (
            <ErrorBox error={error} />
          ) : null}
          <Field
            id="caller"
            label="Caller"
            value={caller}
            onInput={setCaller}
            error={fieldError(error, "caller")}
            hint="A service account or plugin id, e.g. ai-core."
          />
          <Field
            id="target"
            label="Target plugin"
            value={target}
            onInput={setTarget}
            error={fieldError(error, "target")}
          />
          <Field
            id="operations"
            label="Operations"
            value={operations}
            onInput={setOperations}
            error={error?.field.startsWith("operations") ? error.message : undefined}
            hint="Comma-separated, e.g. rag_index, rag_query."
          />
          <button type="submit">Allow</button>
        </form>
      ) : (
        <p class="notice">Read-only: your API key lacks operator:write.</p>
      )}
      {list.kind === "loading" ? <Loading what="the allowlist" /> : null}
      {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
      {list.kind === "ready" && list.data.entries.length === 0 ? (
        <Empty>No caller may call any plugin yet.</Empty>
      ) : null}
      {list.kind === "ready" && list.data.entries.length > 0 ? (
        <table>
          <thead>
            <tr>
              <th scope="col">Caller</th>
              <th scope="col">Target</th>
              <th scope="col">Operations</th>
              <th scope="col">Updated</th>
              <th scope="col">Action</th>
            </tr>
          </thead>
          <tbody>
            {list.data.entries.map((e) => (
              <tr key={`${e.caller}→${e.target}`}>
                <td>{e.caller}</td>
                <td>{e.target}</td>
                <td>{e.operations.join(", ")}</td>
                <td>{formatTime(e.updatedAt?.seconds)}</td>
                <td>
                  {writable ? (
                    <ConfirmButton
                      label={`Remove ${e.caller} → ${e.target}`}
                      confirm="Confirm removal"
                      onConfirm={() =>
                        void act(() =>
                          allowlist.deleteAllowlistEntry({ caller: e.caller, target: e.target }),
                        )
                      }
                    />
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}
