import { useState } from "preact/hooks";

/**
 * Secrets answered once (a new API key, a plugin's credentials, a client secret): shown with
 * a copy button until dismissed; they live in this component's memory only, so a reload
 * loses them for good.
 */
export function ShownOnce(props: {
  title: string;
  secrets: { label: string; value: string; id: string }[];
  onDone: () => void;
}) {
  const [copied, setCopied] = useState("");
  return (
    <div class="shown-once" role="status">
      <p>
        <strong>{props.title}</strong> Shown this once: copy{" "}
        {props.secrets.length > 1 ? "them" : "it"} now.
      </p>
      {props.secrets.map((s) => (
        <p key={s.id}>
          {s.label}:{" "}
          <code class="secret" id={s.id}>
            {s.value}
          </code>{" "}
          <button
            type="button"
            class="secondary"
            onClick={() =>
              void navigator.clipboard?.writeText(s.value).then(
                () => setCopied(s.id),
                () => undefined,
              )
            }
          >
            {copied === s.id ? "Copied" : `Copy ${s.label.toLowerCase()}`}
          </button>
        </p>
      ))}
      <button type="button" onClick={props.onDone}>
        Done: hide {props.secrets.length > 1 ? "them" : "it"}
      </button>
    </div>
  );
}

/** Two-step destructive action: the button, then "Confirm" and "Cancel". */
export function ConfirmButton(props: {
  label: string;
  confirm: string;
  onConfirm: () => void;
  disabled?: boolean;
}) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button
        type="button"
        class="danger"
        disabled={props.disabled}
        onClick={() => setAsking(true)}
      >
        {props.label}
      </button>
    );
  }
  return (
    <fieldset class="confirm">
      <legend class="visually-hidden">{props.confirm}?</legend>
      <button
        type="button"
        class="danger"
        onClick={() => {
          setAsking(false);
          props.onConfirm();
        }}
      >
        {props.confirm}
      </button>{" "}
      <button type="button" class="secondary" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </fieldset>
  );
}
