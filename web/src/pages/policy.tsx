import type { JsonObject } from "@bufbuild/protobuf";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { useState } from "preact/hooks";
import {
  EvaluateRequestSchema,
  PolicyService,
  type ValidatePolicyResponse,
} from "../../../gen/traitgate/policy/v1/policy_pb.js";
import { diffLines } from "../diff.js";
import { formatTime, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ConfirmButton } from "../shown-once.js";
import { Empty, ErrorBox, Loading } from "../ui.js";
import { Playground } from "./policy-playground.js";
import { TraitTree } from "./policy-traits.js";

const short = (v: string) => v.slice(0, 12);

/** Policy versions (diff, activate), a candidate (validate, shadow, store), traits, playground. */
export function PolicyPage({ can }: PageProps) {
  const policy = client(PolicyService);
  const [list, reload] = useLoad(() => policy.listPolicyVersions({ pageSize: 50 }));
  const [pair, setPair] = useState<[string, string]>(["", ""]);
  const [error, setError] = useState<ShownError | undefined>();
  const [editor, setEditor] = useState("");
  const writable = can("policy:write");
  return (
    <div>
      {!writable ? <p class="notice">Read-only: your API key lacks policy:write.</p> : null}
      <section aria-labelledby="versions-title">
        <h2 id="versions-title">Versions</h2>
        {error ? <ErrorBox error={error} /> : null}
        {list.kind === "loading" ? <Loading what="policy versions" /> : null}
        {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
        {list.kind === "ready" && list.data.versions.length === 0 ? (
          <Empty>No version is stored.</Empty>
        ) : null}
        {list.kind === "ready" && list.data.versions.length > 0 ? (
          <table>
            <thead>
              <tr>
                <th scope="col">Version</th>
                <th scope="col">Description</th>
                <th scope="col">Rules</th>
                <th scope="col">Stored</th>
                <th scope="col">Compare</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {list.data.versions.map((v) => (
                <tr key={v.version}>
                  <th scope="row">
                    <code title={v.version}>{short(v.version)}</code>
                    {v.active ? <span class="badge">active</span> : null}
                  </th>
                  <td>{v.description}</td>
                  <td>{v.ruleCount}</td>
                  <td>
                    {formatTime(v.createdAt?.seconds)} {v.createdBy}
                  </td>
                  <td>
                    <label class="check">
                      <input
                        type="radio"
                        name="diff-a"
                        checked={pair[0] === v.version}
                        onChange={() => setPair([v.version, pair[1]])}
                      />{" "}
                      from
                    </label>
                    <label class="check">
                      <input
                        type="radio"
                        name="diff-b"
                        checked={pair[1] === v.version}
                        onChange={() => setPair([pair[0], v.version])}
                      />{" "}
                      to
                    </label>
                  </td>
                  <td class="actions">
                    <button
                      type="button"
                      class="secondary"
                      onClick={async () => {
                        const r = await policy.getPolicyVersion({ version: v.version });
                        setEditor(JSON.stringify(r.document ?? {}, null, 2));
                      }}
                    >
                      Edit a copy of {short(v.version)}
                    </button>{" "}
                    {writable && !v.active ? (
                      <ConfirmButton
                        label={`Activate ${short(v.version)}`}
                        confirm="Confirm activation"
                        onConfirm={async () => {
                          setError(undefined);
                          try {
                            await policy.activatePolicy({ version: v.version });
                            reload();
                          } catch (err) {
                            setError(shownError(err));
                          }
                        }}
                      />
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        ) : null}
        {pair[0] && pair[1] ? (
          <VersionDiff from={pair[0]} to={pair[1]} />
        ) : (
          <p class="hint">Choose a "from" and a "to" version to see their difference.</p>
        )}
      </section>
      <Candidate text={editor} setText={setEditor} writable={writable} onStored={reload} />
      <TraitTree />
      <Playground />
    </div>
  );
}

function VersionDiff({ from, to }: { from: string; to: string }) {
  const policy = client(PolicyService);
  const [state] = useLoad(async () => {
    const [a, b] = await Promise.all([
      policy.getPolicyVersion({ version: from }),
      policy.getPolicyVersion({ version: to }),
    ]);
    return diffLines(
      JSON.stringify(a.document ?? {}, null, 2),
      JSON.stringify(b.document ?? {}, null, 2),
    );
  }, [from, to]);
  if (state.kind === "loading") return <Loading what="the difference" />;
  if (state.kind === "error") return <ErrorBox error={state.error} />;
  const changed = state.data.filter((l) => l.kind !== "same").length;
  return (
    <figure class="diff">
      <figcaption>
        {short(from)} → {short(to)}: {changed === 0 ? "identical" : `${changed} lines differ`}
      </figcaption>
      <pre>
        {state.data
          .filter(
            (l, i, all) =>
              l.kind !== "same" ||
              all.slice(Math.max(0, i - 2), i + 3).some((x) => x.kind !== "same"),
          )
          .map((l, i) => (
            <div key={i} class={`diff-${l.kind}`}>
              {l.kind === "added" ? "+ " : l.kind === "removed" ? "- " : "  "}
              {l.text}
            </div>
          ))}
      </pre>
    </figure>
  );
}

function Candidate(props: {
  text: string;
  setText: (t: string) => void;
  writable: boolean;
  onStored: () => void;
}) {
  const policy = client(PolicyService);
  const [requests, setRequests] = useState("");
  const [description, setDescription] = useState("");
  const [result, setResult] = useState<ValidatePolicyResponse | undefined>();
  const [error, setError] = useState<ShownError | undefined>();
  const [stored, setStored] = useState("");
  const parse = (): JsonObject | undefined => {
    try {
      const doc = JSON.parse(props.text) as unknown;
      if (typeof doc === "object" && doc !== null && !Array.isArray(doc)) return doc as JsonObject;
    } catch {
      // reported below
    }
    setError({
      message: "The candidate is not a JSON object.",
      reason: "POLICY_JSON",
      field: "document",
      code: "",
    });
    return undefined;
  };
  const validate = async () => {
    setError(undefined);
    setResult(undefined);
    const document = parse();
    if (!document) return;
    try {
      const shadow =
        requests.trim() === ""
          ? []
          : (JSON.parse(requests) as JsonValue[]).map((r) => fromJson(EvaluateRequestSchema, r));
      setResult(await policy.validatePolicy({ document, requests: shadow }));
    } catch (err) {
      setError(
        err instanceof SyntaxError
          ? {
              message: "The shadow requests are not a JSON array.",
              reason: "REQUESTS_JSON",
              field: "requests",
              code: "",
            }
          : shownError(err),
      );
    }
  };
  const store = async (activate: boolean) => {
    setError(undefined);
    const document = parse();
    if (!document) return;
    try {
      const r = await policy.putPolicy({ document, description, activate });
      setStored(
        `${r.created ? "Stored" : "Already stored"} as ${short(r.version?.version ?? "")}${r.activated ? ", now active" : ""}.`,
      );
      props.onStored();
    } catch (err) {
      setError(shownError(err));
    }
  };
  return (
    <section aria-labelledby="candidate-title">
      <h2 id="candidate-title">Candidate</h2>
      <div class="field wide-field">
        <label for="candidate">Policy document (JSON)</label>
        <textarea
          id="candidate"
          rows={14}
          value={props.text}
          onInput={(e) => props.setText((e.currentTarget as HTMLTextAreaElement).value)}
        />
      </div>
      <div class="field wide-field">
        <label for="shadow">Shadow requests (optional JSON array of Evaluate requests)</label>
        <textarea
          id="shadow"
          rows={4}
          value={requests}
          placeholder='[{"context": "SEARCH", "traits": ["role:viewer"], "classifications": ["confidential"]}]'
          onInput={(e) => setRequests((e.currentTarget as HTMLTextAreaElement).value)}
        />
      </div>
      {error ? <ErrorBox error={error} /> : null}
      {stored ? (
        <p class="ok" role="status">
          {stored}
        </p>
      ) : null}
      <button type="button" disabled={props.text.trim() === ""} onClick={() => void validate()}>
        Validate
      </button>
      {props.writable ? (
        <>
          <div class="field">
            <label for="candidate-description">Description</label>
            <input
              id="candidate-description"
              value={description}
              onInput={(e) => setDescription((e.currentTarget as HTMLInputElement).value)}
            />
          </div>
          <button
            type="button"
            class="secondary"
            disabled={props.text.trim() === ""}
            onClick={() => void store(false)}
          >
            Store
          </button>{" "}
          <ConfirmButton
            label="Store and activate"
            confirm="Confirm activation"
            disabled={props.text.trim() === ""}
            onConfirm={() => void store(true)}
          />
        </>
      ) : null}
      {result ? (
        <div role="status" class={result.valid ? "ok" : "bad"}>
          <p>
            {result.valid ? `Valid (would be version ${short(result.version)}).` : "Not valid:"}
          </p>
          {result.issues.length > 0 ? (
            <table>
              <thead>
                <tr>
                  <th scope="col">Issue</th>
                  <th scope="col">Rule</th>
                  <th scope="col">Field</th>
                  <th scope="col">What</th>
                </tr>
              </thead>
              <tbody>
                {result.issues.map((i, n) => (
                  <tr key={n}>
                    <td>{i.reason}</td>
                    <td>{i.ruleId}</td>
                    <td>{i.field}</td>
                    <td>{i.message}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          ) : null}
          {result.compared > 0 ? (
            <p>
              Shadow: {result.compared} requests compared, {result.changes.length} decisions would
              change.
            </p>
          ) : null}
          {result.changes.length > 0 ? (
            <table>
              <thead>
                <tr>
                  <th scope="col">Request</th>
                  <th scope="col">Active</th>
                  <th scope="col">Candidate</th>
                </tr>
              </thead>
              <tbody>
                {result.changes.map((c) => (
                  <tr key={c.index}>
                    <td>#{c.index}</td>
                    <td>
                      {c.activeDecision} ({c.activeDecidingRule})
                    </td>
                    <td>
                      {c.candidateDecision} ({c.candidateDecidingRule})
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          ) : null}
        </div>
      ) : null}
    </section>
  );
}
