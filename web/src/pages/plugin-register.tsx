import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import {
  PluginManifestSchema,
  PluginRegistryService,
} from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ErrorBox } from "../ui.js";
import { ManifestForm } from "./plugin-form.js";

/** The new plugin's two secrets, shown once. */
export type Credentials = { pluginId: string; credential: string; coreSecret: string };

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
export function Register({ onRegistered }: { onRegistered: (c: Credentials) => void }) {
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
