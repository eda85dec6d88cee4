import { useState } from "preact/hooks";
import {
  type ApiKey,
  ApiKeyService,
  ApiKeyStatus,
} from "../../../gen/traitgate/admin/v1/api_keys_pb.js";
import { formatTime, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { Empty, ErrorBox, Field, fieldError, Loading } from "../ui.js";

const statusText: Record<number, string> = {
  [ApiKeyStatus.ACTIVE]: "active",
  [ApiKeyStatus.REVOKED]: "revoked",
  [ApiKeyStatus.EXPIRED]: "expired",
};

/** API keys: list, create with scopes (at most the acting key's own), shown once, revoke. */
export function ApiKeysPage({ session, can }: PageProps) {
  const keys = client(ApiKeyService);
  const [list, reload] = useLoad(() => keys.listApiKeys({ pageSize: 100 }));
  const writable = can("api_keys:write");
  return (
    <div>
      {!writable ? <p class="notice">Read-only: your API key lacks api_keys:write.</p> : null}
      {writable ? <CreateKey scopes={session.api_key?.scopes ?? []} onCreated={reload} /> : null}
      <section aria-labelledby="keys-title">
        <h2 id="keys-title">Keys</h2>
        {list.kind === "loading" ? <Loading what="the keys" /> : null}
        {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
        {list.kind === "ready" && list.data.apiKeys.length === 0 ? (
          <Empty>No API key yet.</Empty>
        ) : null}
        {list.kind === "ready" && list.data.apiKeys.length > 0 ? (
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Scopes</th>
                <th scope="col">Status</th>
                <th scope="col">Created</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {list.data.apiKeys.map((k) => (
                <KeyRow
                  key={k.keyId}
                  apiKey={k}
                  writable={writable}
                  current={k.keyId === session.api_key?.id}
                  onChanged={reload}
                />
              ))}
            </tbody>
          </table>
        ) : null}
      </section>
    </div>
  );
}

function KeyRow(props: {
  apiKey: ApiKey;
  writable: boolean;
  current: boolean;
  onChanged: () => void;
}) {
  const k = props.apiKey;
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<ShownError | undefined>();
  const revoke = async () => {
    try {
      await client(ApiKeyService).revokeApiKey({ keyId: k.keyId });
      setConfirming(false);
      props.onChanged();
    } catch (err) {
      setError(shownError(err));
    }
  };
  return (
    <tr>
      <td>
        {k.name}
        {props.current ? <span class="badge">this session</span> : null}
      </td>
      <td>
        <code>{k.prefix}</code>
      </td>
      <td>{k.scopes.join(", ")}</td>
      <td>{statusText[k.status] ?? "unknown"}</td>
      <td>{formatTime(k.createdAt?.seconds)}</td>
      <td>
        {error ? <ErrorBox error={error} /> : null}
        {props.writable && k.status === ApiKeyStatus.ACTIVE && !confirming ? (
          <button type="button" class="danger" onClick={() => setConfirming(true)}>
            Revoke
          </button>
        ) : null}
        {confirming ? (
          <fieldset class="confirm">
            <legend class="visually-hidden">Revoke {k.name}?</legend>
            <button type="button" class="danger" onClick={() => void revoke()}>
              Confirm revoke
            </button>{" "}
            <button type="button" class="secondary" onClick={() => setConfirming(false)}>
              Cancel
            </button>
          </fieldset>
        ) : null}
      </td>
    </tr>
  );
}

function CreateKey({ scopes, onCreated }: { scopes: string[]; onCreated: () => void }) {
  const [name, setName] = useState("");
  const [chosen, setChosen] = useState<string[]>([]);
  const [error, setError] = useState<ShownError | undefined>();
  const [created, setCreated] = useState<string | undefined>();
  const [copied, setCopied] = useState(false);
  const submit = async () => {
    setError(undefined);
    try {
      const res = await client(ApiKeyService).createApiKey({ name, scopes: chosen });
      setCreated(res.key);
      setCopied(false);
      setName("");
      setChosen([]);
      onCreated();
    } catch (err) {
      setError(shownError(err));
    }
  };
  return (
    <section aria-labelledby="create-key-title">
      <h2 id="create-key-title">Create a key</h2>
      {created ? (
        <div class="shown-once" role="status">
          <p>
            The new key, shown this once (only its hash is stored):{" "}
            <code class="secret" id="new-key">
              {created}
            </code>
          </p>
          <button
            type="button"
            onClick={() =>
              void navigator.clipboard?.writeText(created).then(
                () => setCopied(true),
                () => undefined,
              )
            }
          >
            {copied ? "Copied" : "Copy"}
          </button>{" "}
          <button type="button" class="secondary" onClick={() => setCreated(undefined)}>
            Done: hide it
          </button>
        </div>
      ) : null}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void submit();
        }}
      >
        {error && error.field !== "name" && error.field !== "scopes" ? (
          <ErrorBox error={error} />
        ) : null}
        <Field
          id="name"
          label="Name"
          value={name}
          onInput={setName}
          error={fieldError(error, "name")}
          hint="What the key is for, e.g. ci deploy."
        />
        <fieldset aria-describedby={error?.field === "scopes" ? "scopes-error" : undefined}>
          <legend>Scopes (at most those of the key you act with)</legend>
          {scopes.map((s) => (
            <label key={s} class="check">
              <input
                type="checkbox"
                name="scopes"
                value={s}
                checked={chosen.includes(s)}
                onChange={(e) => {
                  const on = (e.currentTarget as HTMLInputElement).checked;
                  setChosen((prev) => (on ? [...prev, s] : prev.filter((x) => x !== s)));
                }}
              />{" "}
              <code>{s}</code>
            </label>
          ))}
          {error?.field === "scopes" ? (
            <small id="scopes-error" class="field-error">
              {error.message}
            </small>
          ) : null}
        </fieldset>
        <button type="submit">Create key</button>
      </form>
    </section>
  );
}
