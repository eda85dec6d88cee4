import type { JsonObject } from "@bufbuild/protobuf";
import { useState } from "preact/hooks";
import { PluginRegistryService } from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import {
  type GetRagStatsResponse,
  SearchService,
} from "../../../gen/traitgate/search/v1/search_pb.js";
import { SettingsService } from "../../../gen/traitgate/settings/v1/settings_pb.js";
import { type Loaded, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ErrorBox, Field, fieldError, Loading } from "../ui.js";

/**
 * Retrieval: the spec's setup step 5 (backend builtin or plugin, the plugin, default top_k) and
 * the backend's document and chunk counts; ingestion of uploaded files or a folder, in
 * batches, with progress.
 */
export function RagPage({ can }: PageProps) {
  const [stats, reloadStats] = useLoad(() => client(SearchService).getRagStats({}));
  return (
    <div>
      <Backend writable={can("settings:write")} onSaved={reloadStats} />
      <Counts stats={stats} reload={reloadStats} />
      <Ingest onSent={reloadStats} />
    </div>
  );
}

/** Documents and chunks of the backend in use (GetRagStats). */
function Counts({ stats, reload }: { stats: Loaded<GetRagStatsResponse>; reload: () => void }) {
  return (
    <section aria-labelledby="counts-title">
      <h2 id="counts-title">Documents and chunks</h2>
      {stats.kind === "loading" ? <Loading what="the counts" /> : null}
      {stats.kind === "error" ? <ErrorBox error={stats.error} /> : null}
      {stats.kind === "ready" ? (
        <p id="rag-counts">
          {stats.data.backend === "plugin"
            ? `Plugin ${stats.data.pluginId || "(none chosen)"}: `
            : "Built-in store: "}
          {stats.data.reported
            ? `${stats.data.documents} documents, ${stats.data.chunks} chunks.`
            : "not reported by the plugin (its manifest has no rag_stats operation)."}
        </p>
      ) : null}
      <button type="button" class="secondary" onClick={reload}>
        Count again
      </button>
    </section>
  );
}

function Backend({ writable, onSaved }: { writable: boolean; onSaved: () => void }) {
  const settings = client(SettingsService);
  const [state, reload] = useLoad(async () => {
    const [current, plugins] = await Promise.all([
      settings.getSettings({}),
      client(PluginRegistryService)
        .listPlugins({})
        .then((r) => r.plugins.map((p) => p.manifest?.id ?? ""))
        .catch(() => [] as string[]),
    ]);
    return { values: current.settings ?? {}, version: current.version, plugins };
  });
  const [edits, setEdits] = useState<JsonObject>({});
  const [error, setError] = useState<ShownError | undefined>();
  const [saved, setSaved] = useState("");
  if (state.kind === "loading") return <Loading what="the retrieval settings" />;
  if (state.kind === "error") return <ErrorBox error={state.error} />;
  const v = { ...state.data.values, ...edits };
  const set = (k: string, value: JsonObject[string]) => setEdits({ ...edits, [k]: value });
  return (
    <section aria-labelledby="backend-title">
      <h2 id="backend-title">Backend</h2>
      {saved ? (
        <p class="ok" role="status">
          {saved}
        </p>
      ) : null}
      {error && !["rag.backend", "rag.plugin_id", "rag.top_k_default"].includes(error.field) ? (
        <ErrorBox error={error} />
      ) : null}
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setError(undefined);
          try {
            const r = await settings.updateSettings({
              values: edits,
              expectedVersion: state.data.version,
            });
            setSaved(`Saved: ${r.changed.join(", ") || "nothing changed"}.`);
            setEdits({});
            reload();
            onSaved();
          } catch (err) {
            setError(shownError(err));
          }
        }}
      >
        <div class="field">
          <label for="rag-backend">Backend</label>
          <select
            id="rag-backend"
            disabled={!writable}
            value={String(v["rag.backend"] ?? "builtin")}
            onChange={(e) => set("rag.backend", (e.currentTarget as HTMLSelectElement).value)}
          >
            <option value="builtin">builtin: the core's own store</option>
            <option value="plugin">plugin: a registered retrieval plugin</option>
          </select>
        </div>
        <div class="field">
          <label for="rag-plugin">Plugin</label>
          <select
            id="rag-plugin"
            disabled={!writable || v["rag.backend"] !== "plugin"}
            value={String(v["rag.plugin_id"] ?? "")}
            aria-describedby={error?.field === "rag.plugin_id" ? "rag-plugin-error" : undefined}
            onChange={(e) => set("rag.plugin_id", (e.currentTarget as HTMLSelectElement).value)}
          >
            <option value="">(none)</option>
            {state.data.plugins.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
          {error?.field === "rag.plugin_id" ? (
            <small id="rag-plugin-error" class="field-error">
              {error.message}
            </small>
          ) : null}
        </div>
        <Field
          id="rag-top-k"
          label="Default top_k"
          value={String(v["rag.top_k_default"] ?? "")}
          disabled={!writable}
          onInput={(t) => set("rag.top_k_default", /^\d+$/.test(t) ? Number(t) : t)}
          error={fieldError(error, "rag.top_k_default")}
        />
        {writable ? (
          <button type="submit" disabled={Object.keys(edits).length === 0}>
            Save
          </button>
        ) : (
          <p class="notice">Read-only: your API key lacks settings:write.</p>
        )}
      </form>
    </section>
  );
}

/** Batches under the request body limit (1 MiB by default) and the service's 500 documents. */
const batchBytes = 700_000;
const batchDocs = 200;

function Ingest({ onSent }: { onSent: () => void }) {
  const [files, setFiles] = useState<File[]>([]);
  const [traits, setTraits] = useState("");
  const [classification, setClassification] = useState("internal");
  const [progress, setProgress] = useState<
    { done: number; total: number; chunks: number; skipped: number } | undefined
  >();
  const [error, setError] = useState<ShownError | undefined>();
  const pick = (e: Event) =>
    setFiles(Array.from((e.currentTarget as HTMLInputElement).files ?? []));

  async function run() {
    setError(undefined);
    const state = { done: 0, total: files.length, chunks: 0, skipped: 0 };
    setProgress({ ...state });
    const requiredTraits = traits.split(/[\s,]+/).filter(Boolean);
    let batch: {
      path: string;
      title: string;
      content: string;
      requiredTraits: string[];
      classification: string;
    }[] = [];
    let size = 0;
    const send = async () => {
      if (batch.length === 0) return;
      const r = await client(SearchService).ingest({ documents: batch });
      state.done += batch.length;
      state.chunks += r.documents.reduce((n, d) => n + d.chunks, 0);
      state.skipped += r.documents.filter((d) => d.skipped).length;
      setProgress({ ...state });
      batch = [];
      size = 0;
    };
    try {
      for (const f of files) {
        const content = await f.text();
        const path = f.webkitRelativePath || f.name;
        if (size + content.length > batchBytes || batch.length >= batchDocs) await send();
        batch.push({ path, title: f.name, content, requiredTraits, classification });
        size += content.length;
      }
      await send();
    } catch (err) {
      setError(shownError(err));
    }
    onSent();
  }

  return (
    <section aria-labelledby="ingest-title">
      <h2 id="ingest-title">Ingest documents</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void run();
        }}
      >
        <div class="field">
          <label for="ingest-files">Files</label>
          <input id="ingest-files" type="file" multiple onChange={pick} />
        </div>
        <div class="field">
          <label for="ingest-folder">Or a folder</label>
          <input
            id="ingest-folder"
            type="file"
            multiple
            {...{ webkitdirectory: true }}
            onChange={pick}
          />
        </div>
        <Field
          id="ingest-traits"
          label="Required traits"
          value={traits}
          onInput={setTraits}
          hint="Comma-separated, e.g. compliance:hipaa, role:clinician."
          error={error?.field.includes("required_traits") ? error.message : undefined}
        />
        <Field
          id="ingest-classification"
          label="Classification"
          value={classification}
          onInput={setClassification}
          error={error?.field.includes("classification") ? error.message : undefined}
        />
        {error &&
        !error.field.includes("required_traits") &&
        !error.field.includes("classification") ? (
          <ErrorBox error={error} />
        ) : null}
        <button type="submit" disabled={files.length === 0}>
          Ingest {files.length > 0 ? `${files.length} file${files.length === 1 ? "" : "s"}` : ""}
        </button>
      </form>
      {progress ? (
        <div role="status">
          <label for="ingest-progress">
            {progress.done} of {progress.total} documents sent ({progress.chunks} chunks,{" "}
            {progress.skipped} unchanged)
          </label>{" "}
          <progress id="ingest-progress" max={progress.total} value={progress.done} />
        </div>
      ) : null}
    </section>
  );
}
