import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { useState } from "preact/hooks";
import {
  type SettingDefinition,
  SettingsService,
} from "../../../gen/traitgate/settings/v1/settings_pb.js";
import { useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { Empty, ErrorBox, Loading } from "../ui.js";
import { SettingInput } from "./setting-input.js";
import { SettingsHistory } from "./settings-history.js";

interface Loaded {
  definitions: SettingDefinition[];
  values: JsonObject;
  sources: Record<string, string>;
  version: bigint;
}

type Conflict = { mine: JsonObject; theirs: Loaded; base: JsonObject };

const show = (v: JsonValue | undefined) => (v === undefined ? "—" : JSON.stringify(v));

/**
 * The settings as a form generated from the registry. Saves only what changed, with the
 * version it was read at (If-Match): a 409 shows what changed meanwhile and offers to re-apply.
 */
export function SettingsPage({ has, can }: PageProps) {
  const settings = client(SettingsService);
  const editable = has("settings_editor") && can("settings:write");
  const [round, setRound] = useState(0);
  const [state] = useLoad(async (): Promise<Loaded> => {
    const [defs, current] = await Promise.all([
      settings.listSettingDefinitions({}),
      settings.getSettings({}),
    ]);
    return {
      definitions: defs.definitions,
      values: current.settings ?? {},
      sources: current.sources,
      version: current.version,
    };
  }, [round]);
  const [edits, setEdits] = useState<JsonObject>({});
  const [error, setError] = useState<ShownError | undefined>();
  const [saved, setSaved] = useState<string | undefined>();
  const [conflict, setConflict] = useState<Conflict | undefined>();

  if (state.kind === "loading") return <Loading what="the settings" />;
  if (state.kind === "error") return <ErrorBox error={state.error} />;
  const loaded = state.data;
  if (loaded.definitions.length === 0) return <Empty>The registry has no setting.</Empty>;

  async function save(values: JsonObject, version: bigint) {
    setError(undefined);
    setSaved(undefined);
    try {
      const res = await settings.updateSettings({ values, expectedVersion: version });
      setEdits({});
      setConflict(undefined);
      setSaved(
        `Saved (version ${res.version}): ${res.changed.join(", ") || "nothing changed"}` +
          (res.restartRequired.length > 0
            ? `. Restart needed for: ${res.restartRequired.join(", ")}.`
            : "."),
      );
      setRound((r) => r + 1);
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.Aborted) {
        const latest = await settings.getSettings({});
        setConflict({
          mine: values,
          base: loaded.values,
          theirs: {
            ...loaded,
            values: latest.settings ?? {},
            sources: latest.sources,
            version: latest.version,
          },
        });
        return;
      }
      setError(shownError(err));
    }
  }

  const changedKeys = Object.keys(edits);
  return (
    <div>
      {!editable ? (
        <p class="notice">
          Read-only:{" "}
          {has("settings_editor")
            ? "your API key lacks settings:write."
            : "your role may read the settings, not change them."}
        </p>
      ) : null}
      {saved ? (
        <p class="ok" role="status">
          {saved}
        </p>
      ) : null}
      {error && !loaded.definitions.some((d) => d.key === error.field) ? (
        <ErrorBox error={error} />
      ) : null}
      {conflict ? (
        <ConflictView
          conflict={conflict}
          onReapply={() => void save(conflict.mine, conflict.theirs.version)}
          onDiscard={() => {
            setConflict(undefined);
            setEdits({});
            setRound((r) => r + 1);
          }}
        />
      ) : null}
      <form
        class="settings"
        onSubmit={(e) => {
          e.preventDefault();
          void save(edits, loaded.version);
        }}
      >
        <p>
          Version {String(loaded.version)}. Values come from the database, the environment or the
          default, as each row says.
        </p>
        {loaded.definitions.map((d) => (
          <SettingInput
            key={d.key}
            definition={d}
            value={d.key in edits ? edits[d.key] : loaded.values[d.key]}
            defaultValue={d.defaultValue ? toJson(ValueSchema, d.defaultValue) : undefined}
            source={loaded.sources[d.key] ?? ""}
            disabled={!editable}
            error={error?.field === d.key ? error.message : undefined}
            onChange={(v) => setEdits((prev) => ({ ...prev, [d.key]: v }))}
          />
        ))}
        {editable ? (
          <button type="submit" disabled={changedKeys.length === 0}>
            Save {changedKeys.length > 0 ? `(${changedKeys.join(", ")})` : ""}
          </button>
        ) : null}
      </form>
      <SettingsHistory round={round} />
    </div>
  );
}

function ConflictView(props: { conflict: Conflict; onReapply: () => void; onDiscard: () => void }) {
  const { mine, base, theirs } = props.conflict;
  const keys = [...new Set([...Object.keys(mine), ...Object.keys(theirs.values)])].filter(
    (k) => k in mine || show(base[k]) !== show(theirs.values[k]),
  );
  return (
    <section class="conflict" role="alert" aria-labelledby="conflict-title">
      <h2 id="conflict-title">Someone else changed the settings meanwhile</h2>
      <p>Nothing of yours was saved. The settings are now at version {String(theirs.version)}.</p>
      <table>
        <thead>
          <tr>
            <th scope="col">Setting</th>
            <th scope="col">When you loaded</th>
            <th scope="col">Now</th>
            <th scope="col">Yours</th>
          </tr>
        </thead>
        <tbody>
          {keys.map((k) => (
            <tr key={k}>
              <th scope="row">{k}</th>
              <td>{show(base[k])}</td>
              <td>{show(theirs.values[k])}</td>
              <td>{k in mine ? show(mine[k]) : "—"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <button type="button" onClick={props.onReapply}>
        Re-apply my changes
      </button>{" "}
      <button type="button" class="secondary" onClick={props.onDiscard}>
        Discard mine
      </button>
    </section>
  );
}
