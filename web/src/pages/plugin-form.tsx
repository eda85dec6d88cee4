import { create } from "@bufbuild/protobuf";
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import {
  type PluginManifest,
  PluginManifestSchema,
} from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import type { ShownError } from "../rpc.js";
import { ErrorBox, Field } from "../ui.js";

/**
 * A plugin manifest as a form. The server's 400 names a field (`manifest.host`,
 * `manifest.endpoints.rag_query`, `manifest.traits[0]`, ...): the error is shown next to the
 * input that holds it; anything else above the form.
 */

const inputs = ["id", "name", "plugin_type", "host", "port", "endpoints", "traits"] as const;
type Input = (typeof inputs)[number];

/** The input a server field belongs to (`manifest.endpoints.x` → endpoints). */
function inputOf(field: string): Input | undefined {
  const name = field.replace(/^manifest\./, "");
  return inputs.find((i) => name === i || name.startsWith(`${i}.`) || name.startsWith(`${i}[`));
}

const problem = (field: Input, message: string): ShownError => ({
  message,
  reason: "INVALID_MANIFEST",
  field: `manifest.${field}`,
  code: "",
});

/** `operation /path` (or `operation = /path`), one a line. */
function parseEndpoints(
  text: string,
): { endpoints: Record<string, string> } | { error: ShownError } {
  const endpoints: Record<string, string> = {};
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    const match = /^\s*([^\s=:]+)\s*[=:]?\s*(\S+)\s*$/.exec(line);
    if (!match) {
      return { error: problem("endpoints", `"${line.trim()}" is not "operation /path"`) };
    }
    endpoints[match[1] as string] = match[2] as string;
  }
  return { endpoints };
}

export function ManifestForm(props: {
  error: ShownError | undefined;
  onSubmit: (m: PluginManifest | ShownError) => Promise<boolean>;
  children: ComponentChildren;
}) {
  const empty: Record<Input, string> = {
    id: "",
    name: "",
    plugin_type: "",
    host: "127.0.0.1",
    port: "8080",
    endpoints: "",
    traits: "",
  };
  const [v, setV] = useState(empty);
  const set = (k: Input) => (value: string) => setV({ ...v, [k]: value });
  const { error } = props;
  const at = error ? inputOf(error.field) : undefined;
  const errorOf = (k: Input) =>
    at === k && error ? `${error.field.replace(/^manifest\./, "")}: ${error.message}` : undefined;

  const submit = async () => {
    const parsed = parseEndpoints(v.endpoints);
    if ("error" in parsed) {
      await props.onSubmit(parsed.error);
      return;
    }
    const port = v.port.trim() === "" ? 0 : Number(v.port);
    if (!Number.isInteger(port)) {
      await props.onSubmit(problem("port", "port must be a whole number (1–65535)"));
      return;
    }
    const manifest = create(PluginManifestSchema, {
      id: v.id.trim(),
      name: v.name.trim(),
      pluginType: v.plugin_type.trim(),
      host: v.host.trim(),
      port,
      endpoints: parsed.endpoints,
      traits: v.traits.split(/[\s,]+/).filter(Boolean),
    });
    if (await props.onSubmit(manifest)) setV(empty);
  };

  return (
    <form
      class="manifest-form"
      onSubmit={(e) => {
        e.preventDefault();
        void submit();
      }}
    >
      {error && at === undefined ? <ErrorBox error={error} /> : null}
      <Field id="plugin-id" label="Id" value={v.id} onInput={set("id")} error={errorOf("id")} />
      <Field
        id="plugin-name"
        label="Name"
        value={v.name}
        onInput={set("name")}
        error={errorOf("name")}
      />
      <Field
        id="plugin-type"
        label="Plugin type"
        value={v.plugin_type}
        onInput={set("plugin_type")}
        hint="e.g. internal, external, retrieval"
        error={errorOf("plugin_type")}
      />
      <Field
        id="plugin-host"
        label="Host"
        value={v.host}
        onInput={set("host")}
        error={errorOf("host")}
      />
      <Field
        id="plugin-port"
        label="Port"
        value={v.port}
        inputMode="numeric"
        onInput={set("port")}
        error={errorOf("port")}
      />
      <div class="field wide-field">
        <label for="plugin-endpoints">Endpoints</label>
        <textarea
          id="plugin-endpoints"
          rows={4}
          value={v.endpoints}
          placeholder={"rag_index /rag/index\nrag_query /rag/query"}
          aria-invalid={errorOf("endpoints") ? "true" : undefined}
          aria-describedby={
            errorOf("endpoints")
              ? "plugin-endpoints-hint plugin-endpoints-error"
              : "plugin-endpoints-hint"
          }
          onInput={(e) => set("endpoints")((e.currentTarget as HTMLTextAreaElement).value)}
        />
        <small id="plugin-endpoints-hint" class="hint">
          One operation a line: its name, then its path on the plugin.
        </small>
        {errorOf("endpoints") ? (
          <small id="plugin-endpoints-error" class="field-error">
            {errorOf("endpoints")}
          </small>
        ) : null}
      </div>
      <Field
        id="plugin-traits"
        label="Traits"
        value={v.traits}
        onInput={set("traits")}
        hint="Comma-separated, e.g. compliance:hipaa"
        error={errorOf("traits")}
      />
      {props.children}
      <button type="submit" disabled={v.id.trim() === "" || v.endpoints.trim() === ""}>
        Register
      </button>
    </form>
  );
}
