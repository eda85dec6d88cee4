import type { ComponentChildren } from "preact";
import type { ShownError } from "./rpc.js";

export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status">
      Loading {what}…
    </p>
  );
}

export function ErrorBox({ error, title }: { error: ShownError; title?: string }) {
  return (
    <div class="error" role="alert">
      {title ? <strong>{title}: </strong> : null}
      {error.message}
      {error.reason ? <span class="reason"> ({error.reason})</span> : null}
    </div>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** A labelled input; the error shown next to it when the server names its field. */
export function Field(props: {
  id: string;
  label: string;
  value: string;
  onInput: (value: string) => void;
  type?: string;
  error?: string | undefined;
  autocomplete?: string;
  inputMode?: "numeric" | "text";
  disabled?: boolean;
  hint?: string;
}) {
  const errorId = `${props.id}-error`;
  const hintId = `${props.id}-hint`;
  const described = [props.error ? errorId : "", props.hint ? hintId : ""]
    .filter(Boolean)
    .join(" ");
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      <input
        id={props.id}
        name={props.id}
        type={props.type ?? "text"}
        value={props.value}
        autocomplete={props.autocomplete ?? "off"}
        inputMode={props.inputMode}
        disabled={props.disabled}
        aria-invalid={props.error ? "true" : undefined}
        aria-describedby={described || undefined}
        onInput={(e) => props.onInput((e.currentTarget as HTMLInputElement).value)}
      />
      {props.hint ? (
        <small id={hintId} class="hint">
          {props.hint}
        </small>
      ) : null}
      {props.error ? (
        <small id={errorId} class="field-error">
          {props.error}
        </small>
      ) : null}
    </div>
  );
}

/** The error of a form: next to its field when the server names one the form has, else above. */
export function fieldError(error: ShownError | undefined, field: string): string | undefined {
  return error && error.field === field ? error.message : undefined;
}

export function formError(error: ShownError | undefined, fields: readonly string[]) {
  return error && !fields.includes(error.field) ? <ErrorBox error={error} /> : null;
}
