import type { JsonValue } from "@bufbuild/protobuf";
import { useState } from "preact/hooks";
import type { SettingDefinition } from "../../../gen/traitgate/settings/v1/settings_pb.js";

const id = (key: string) => `setting-${key.replace(/[^a-z0-9]/gi, "-")}`;

/** One setting: the control its type calls for, where its value comes from, its error. */
export function SettingInput(props: {
  definition: SettingDefinition;
  value: JsonValue | undefined;
  defaultValue: JsonValue | undefined;
  source: string;
  disabled: boolean;
  error: string | undefined;
  onChange: (value: JsonValue) => void;
}) {
  const d = props.definition;
  const inputId = id(d.key);
  const [replacing, setReplacing] = useState(false);
  const described = `${inputId}-about${props.error ? ` ${inputId}-error` : ""}`;
  const common = {
    id: inputId,
    name: d.key,
    disabled: props.disabled,
    "aria-describedby": described,
    "aria-invalid": props.error ? ("true" as const) : undefined,
  };
  let control: preact.JSX.Element;
  if (d.secret && !replacing) {
    control = (
      <span class="secret-row">
        <code id={inputId}>{String(props.value ?? "") || "(not set)"}</code>{" "}
        {props.disabled ? null : (
          <button type="button" class="secondary" onClick={() => setReplacing(true)}>
            Replace
          </button>
        )}
      </span>
    );
  } else if (d.type === "boolean") {
    control = (
      <input
        {...common}
        type="checkbox"
        checked={props.value === true}
        onChange={(e) => props.onChange((e.currentTarget as HTMLInputElement).checked)}
      />
    );
  } else if (d.allowedValues.length > 0) {
    control = (
      <select
        {...common}
        value={String(props.value ?? "")}
        onChange={(e) => props.onChange((e.currentTarget as HTMLSelectElement).value)}
      >
        {d.allowedValues.map((v) => (
          <option key={v} value={v}>
            {v}
          </option>
        ))}
      </select>
    );
  } else if (d.type === "integer") {
    control = (
      <input
        {...common}
        type="text"
        inputMode="numeric"
        value={String(props.value ?? "")}
        onInput={(e) => {
          const raw = (e.currentTarget as HTMLInputElement).value;
          // A number when it is one; the text otherwise, so the server names the mistake.
          props.onChange(/^-?\d+$/.test(raw) ? Number(raw) : raw);
        }}
      />
    );
  } else {
    control = (
      <input
        {...common}
        type={d.secret ? "password" : "text"}
        autocomplete="off"
        value={d.secret ? undefined : String(props.value ?? "")}
        onInput={(e) => props.onChange((e.currentTarget as HTMLInputElement).value)}
      />
    );
  }
  const range = d.min !== undefined && d.max !== undefined ? ` ${d.min}–${d.max}.` : "";
  return (
    <div class="field setting">
      <label for={inputId}>
        <code>{d.key}</code>
      </label>
      {control}
      <small id={`${inputId}-about`} class="hint">
        {d.description} Type {d.type}
        {d.allowedValues.length > 0 ? ` (${d.allowedValues.join(", ")})` : ""}.{range} Default{" "}
        {JSON.stringify(props.defaultValue ?? null)}; from {props.source || "default"}
        {d.environmentVariable ? ` (environment ${d.environmentVariable})` : ""}
        {d.restartRequired ? "; needs a restart" : ""}.
      </small>
      {props.error ? (
        <small id={`${inputId}-error`} class="field-error">
          {props.error}
        </small>
      ) : null}
    </div>
  );
}
