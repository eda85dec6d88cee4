import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import {
  type Plugin,
  PluginManifestSchema,
  type PluginReachability,
  PluginRegistryService,
} from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import { formatTime, type Loaded, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { Reachability, useReachability } from "../reachability.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ConfirmButton, ShownOnce } from "../shown-once.js";
import { Empty, ErrorBox, Loading } from "../ui.js";
import { Allowlist } from "./allowlist.js";
import { ManifestForm } from "./plugin-form.js";

type Credentials = { pluginId: string; credential: string; coreSecret: string };

/** Plugins: register from a manifest, credentials shown once, enable/disable, rotate, delete. */
export function PluginsPage(props: PageProps) {
  const registry = client(PluginRegistryService);
  const [list, reloadList] = useLoad(() => registry.listPlugins({}));
  const [reach, recheck] = useReachability();
  const reload = () => {
    reloadList();
    recheck();
  };
  const [credentials, setCredentials] = useState<Credentials | undefined>();
  const [error, setError] = useState<ShownError | undefined>();
  const writable = props.can("plugins:write");

  const act = async (fn: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await fn();
      reload();
    } catch (err) {
      setError(shownError(err));
    }
  };

  return (
    <div>
      {!writable ? <p class="notice">Read-only: your API key lacks plugins:write.</p> : null}
      {credentials ? (
        <ShownOnce
          title={`Credentials of ${credentials.pluginId}.`}
          secrets={[
            { label: "Credential", value: credentials.credential, id: "plugin-credential" },
            { label: "Core secret", value: credentials.coreSecret, id: "plugin-core-secret" },
          ]}
          onDone={() => setCredentials(undefined)}
        />
      ) : null}
      {writable ? (
        <Register
          onRegistered={(c) => {
            setCredentials(c);
            reload();
          }}
        />
      ) : null}
      <section aria-labelledby="plugins-list-title">
        <h2 id="plugins-list-title">Registered plugins</h2>
        <button type="button" class="secondary" onClick={recheck}>
          Check reachability
        </button>
        {error ? <ErrorBox error={error} /> : null}
        {list.kind === "loading" ? <Loading what="the plugins" /> : null}
        {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
        {list.kind === "ready" && list.data.plugins.length === 0 ? (
          <Empty>No plugin is registered.</Empty>
        ) : null}
        {list.kind === "ready" && list.data.plugins.length > 0 ? (
          <table>
            <thead>
              <tr>
                <th scope="col">Id</th>
                <th scope="col">Type</th>
                <th scope="col">Address</th>
                <th scope="col">Operations</th>
                <th scope="col">State</th>
                <th scope="col">Reachability</th>
                <th scope="col">Credentials issued</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.data.plugins.map((p) => (
                <PluginRow
                  key={p.manifest?.id}
                  plugin={p}
                  reach={reach}
                  writable={writable}
                  act={act}
                  onCredentials={setCredentials}
                />
              ))}
            </tbody>
          </table>
        ) : null}
      </section>
      {props.can("operator:read") ? (
        <Allowlist writable={props.can("operator:write")} />
      ) : (
        <p class="notice">The operator allowlist needs the key scope operator:read.</p>
      )}
    </div>
  );
}

function PluginRow(props: {
  plugin: Plugin;
  reach: Loaded<Map<string, PluginReachability>>;
  writable: boolean;
  act: (fn: () => Promise<unknown>) => Promise<void>;
  onCredentials: (c: Credentials) => void;
}) {
  const registry = client(PluginRegistryService);
  const m = props.plugin.manifest;
  const id = m?.id ?? "";
  return (
    <tr>
      <th scope="row">
        {id}
        <div class="hint">{m?.name}</div>
      </th>
      <td>{m?.pluginType}</td>
      <td>
        <code>
          {m?.host}:{m?.port}
        </code>
        {props.plugin.unlistedHost ? <span class="badge">unlisted host</span> : null}
      </td>
      <td>{Object.keys(m?.endpoints ?? {}).join(", ")}</td>
      <td>{props.plugin.enabled ? "enabled" : "disabled"}</td>
      <td>
        <Reachability id={id} reach={props.reach} />
      </td>
      <td>{formatTime(props.plugin.credentialsIssuedAt?.seconds)}</td>
      <td class="actions">
        {props.writable ? (
          <>
            <button
              type="button"
              class="secondary"
              onClick={() =>
                void props.act(() =>
                  props.plugin.enabled
                    ? registry.disablePlugin({ pluginId: id })
                    : registry.enablePlugin({ pluginId: id }),
                )
              }
            >
              {props.plugin.enabled ? `Disable ${id}` : `Enable ${id}`}
            </button>{" "}
            <ConfirmButton
              label={`Rotate ${id}'s credentials`}
              confirm="Confirm rotation"
              onConfirm={() =>
                void props.act(async () => {
                  const r = await registry.rotatePluginCredentials({ pluginId: id });
                  props.onCredentials({
                    pluginId: id,
                    credential: r.credentials?.credential ?? "",
                    coreSecret: r.credentials?.coreSecret ?? "",
                  });
                })
              }
            />{" "}
            <ConfirmButton
              label={`Delete ${id}`}
              confirm="Confirm deletion"
              onConfirm={() => void props.act(() => registry.deletePlugin({ pluginId: id }))}
            />
          </>
        ) : null}
      </td>
    </tr>
  );
}

const example = JSON.stringify(
  {
    id: "rag",
    name: "Retrieval",
    plugin_type: "retrieval",
    host: "127.0.0.1",
    port: 8081,
    endpoints: { rag_index: "/index", rag_query: "/query" },
    traits: [],
  },
  null,
  2,
);

type Manifest = ReturnType<typeof fromJson<typeof PluginManifestSchema>>;

/** Register a plugin: fill a form, or paste the manifest as JSON. */
function Register({ onRegistered }: { onRegistered: (c: Credentials) => void }) {
  const [mode, setMode] = useState<"form" | "json">("form");
  const [unlisted, setUnlisted] = useState(false);
  const [error, setError] = useState<ShownError | undefined>();
  /** Registers; true when it did (the form then clears). */
  const register = async (manifest: Manifest | ShownError): Promise<boolean> => {
    setError(undefined);
    if (!("$typeName" in manifest)) {
      setError(manifest);
      return false;
    }
    try {
      const r = await client(PluginRegistryService).registerPlugin({
        manifest,
        allowUnlistedHost: unlisted,
      });
      onRegistered({
        pluginId: r.plugin?.manifest?.id ?? "",
        credential: r.credentials?.credential ?? "",
        coreSecret: r.credentials?.coreSecret ?? "",
      });
      return true;
    } catch (err) {
      setError(shownError(err));
      return false;
    }
  };
  const unlistedBox = (
    <label class="check">
      <input
        type="checkbox"
        checked={unlisted}
        onChange={(e) => setUnlisted((e.currentTarget as HTMLInputElement).checked)}
      />{" "}
      Allow a host outside PLUGIN_ALLOWED_HOSTS (public addresses only; audited)
    </label>
  );
  return (
    <section aria-labelledby="register-title">
      <h2 id="register-title">Register a plugin</h2>
      <fieldset class="mode">
        <legend>Manifest</legend>
        {(["form", "json"] as const).map((m) => (
          <label class="check" key={m}>
            <input
              type="radio"
              name="manifest-mode"
              value={m}
              checked={mode === m}
              onChange={() => {
                setMode(m);
                setError(undefined);
              }}
            />{" "}
            {m === "form" ? "Fill a form" : "Paste JSON"}
          </label>
        ))}
      </fieldset>
      {mode === "form" ? (
        <ManifestForm error={error} onSubmit={register}>
          {unlistedBox}
        </ManifestForm>
      ) : (
        <ManifestJson error={error} onSubmit={register}>
          {unlistedBox}
        </ManifestJson>
      )}
    </section>
  );
}

function ManifestJson(props: {
  error: ShownError | undefined;
  onSubmit: (m: Manifest | ShownError) => Promise<boolean>;
  children: ComponentChildren;
}) {
  const [text, setText] = useState("");
  const { error } = props;
  const submit = async () => {
    let manifest: Manifest;
    try {
      manifest = fromJson(PluginManifestSchema, JSON.parse(text) as JsonValue);
    } catch (err) {
      await props.onSubmit({
        message: `The manifest is not valid JSON for a plugin manifest: ${(err as Error).message}`,
        reason: "MANIFEST_JSON",
        field: "manifest",
        code: "",
      });
      return;
    }
    if (await props.onSubmit(manifest)) setText("");
  };
  const fieldNamed = error !== undefined && error.field !== "";
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        void submit();
      }}
    >
      {error && !fieldNamed ? <ErrorBox error={error} /> : null}
      <div class="field wide-field">
        <label for="manifest">Manifest (JSON)</label>
        <textarea
          id="manifest"
          rows={10}
          value={text}
          placeholder={example}
          aria-invalid={fieldNamed ? "true" : undefined}
          aria-describedby={fieldNamed ? "manifest-error" : "manifest-hint"}
          onInput={(e) => setText((e.currentTarget as HTMLTextAreaElement).value)}
        />
        <small id="manifest-hint" class="hint">
          Fields: id, name, plugin_type, host, port, endpoints (operation → path), traits.
        </small>
        {fieldNamed ? (
          <small id="manifest-error" class="field-error">
            {error.field}: {error.message}
          </small>
        ) : null}
      </div>
      {props.children}
      <button type="submit" disabled={text.trim() === ""}>
        Register
      </button>
    </form>
  );
}
