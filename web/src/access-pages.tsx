import { useState } from "preact/hooks";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import type { SessionInfo } from "./api.js";
import { QrCode } from "./qr.js";
import { client, type ShownError, shownError } from "./rpc.js";
import { Field, fieldError, formError } from "./ui.js";

/** Signed in, but the policy shows this user no console page (clinicians, viewers). */
export function NoAccess({ session, onSignOut }: { session: SessionInfo; onSignOut: () => void }) {
  return (
    <main class="sign-in" aria-labelledby="no-access-title">
      <h1 id="no-access-title">No access to the console</h1>
      <p>
        You are signed in as <strong>{session.user?.username}</strong> (
        {session.user?.roles.join(", ") || "no role"}). The platform's policy gives your roles no
        page of the administration console.
      </p>
      <p>If you need access, ask an administrator to give you the role that needs it.</p>
      <button type="button" onClick={onSignOut}>
        Sign out
      </button>
    </main>
  );
}

type Enrol =
  | { kind: "start" }
  | { kind: "scan"; secret: string; uri: string }
  | { kind: "done"; codes: string[] };

/**
 * An administrator without a second factor: the policy (rule ui-admin-console-mfa) keeps the
 * console closed. Enrol here, then sign in again with a code.
 */
export function MfaNeeded({ session, onSignOut }: { session: SessionInfo; onSignOut: () => void }) {
  const identity = client(IdentityService);
  const [state, setState] = useState<Enrol>({ kind: "start" });
  const [code, setCode] = useState("");
  const [error, setError] = useState<ShownError | undefined>();
  const run = async (fn: () => Promise<void>) => {
    setError(undefined);
    try {
      await fn();
    } catch (err) {
      setError(shownError(err));
    }
  };
  return (
    <main class="sign-in" aria-labelledby="mfa-title">
      <h1 id="mfa-title">A second factor is needed</h1>
      <p>
        Signed in as <strong>{session.user?.username}</strong>. Administrators use the console only
        after signing in with a second factor (the policy's rule <code>ui-admin-console-mfa</code>).
      </p>
      {formError(error, ["code"])}
      {state.kind === "start" ? (
        <button
          type="button"
          onClick={() =>
            void run(async () => {
              const r = await identity.enrollMfa({});
              setState({ kind: "scan", secret: r.secret, uri: r.otpauthUri });
            })
          }
        >
          Set up an authenticator app
        </button>
      ) : null}
      {state.kind === "scan" ? (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void run(async () => {
              const r = await identity.activateMfa({ code });
              setState({ kind: "done", codes: r.recoveryCodes });
            });
          }}
        >
          <QrCode text={state.uri} label="QR code of your authenticator key" />
          <p>
            Key: <code class="secret">{state.secret}</code>
          </p>
          <Field
            id="code"
            label="First code from the app"
            value={code}
            onInput={setCode}
            inputMode="numeric"
            autocomplete="one-time-code"
            error={fieldError(error, "code")}
          />
          <button type="submit">Turn on</button>
        </form>
      ) : null}
      {state.kind === "done" ? (
        <section aria-labelledby="codes-title">
          <h2 id="codes-title">Recovery codes</h2>
          <p>Keep them safe; they are shown only now. Then sign in again with a code.</p>
          <ul class="codes">
            {state.codes.map((c) => (
              <li key={c}>
                <code>{c}</code>
              </li>
            ))}
          </ul>
        </section>
      ) : null}
      <p>
        <button type="button" class="secondary" onClick={onSignOut}>
          Sign out
        </button>
      </p>
    </main>
  );
}
