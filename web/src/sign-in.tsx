import { useState } from "preact/hooks";
import { post, type SessionInfo } from "./api.js";
import { QrCode } from "./qr.js";
import { type ShownError, shownError } from "./rpc.js";
import { ErrorBox, Field, fieldError, formError } from "./ui.js";

type Step =
  | { kind: "password" }
  | { kind: "mfa" }
  | { kind: "enrol"; secret: string; otpauthUri: string }
  | { kind: "recovery"; codes: string[] };

interface SignInAnswer {
  step: "mfa" | "enrol" | "api_key" | "ready";
  secret?: string;
  otpauth_uri?: string;
}

/**
 * Username and password, then the TOTP code (or MFA enrolment), in one form that changes
 * step. The password stays in this component's memory only until sign-in ends.
 */
export function SignIn({ ended, onSignedIn }: { ended: boolean; onSignedIn: () => void }) {
  const [step, setStep] = useState<Step>({ kind: "password" });
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [code, setCode] = useState("");
  const [error, setError] = useState<ShownError | undefined>();
  const [busy, setBusy] = useState(false);

  async function run(fn: () => Promise<void>) {
    setBusy(true);
    setError(undefined);
    try {
      await fn();
    } catch (err) {
      setError(shownError(err));
    } finally {
      setBusy(false);
    }
  }

  const signIn = (totpCode: string) =>
    run(async () => {
      const answer = await post<SignInAnswer>("/console/api/sign-in", {
        username,
        password,
        totp_code: totpCode,
      });
      setCode("");
      if (answer.step === "mfa") setStep({ kind: "mfa" });
      else if (answer.step === "enrol") {
        setStep({
          kind: "enrol",
          secret: answer.secret ?? "",
          otpauthUri: answer.otpauth_uri ?? "",
        });
      } else {
        setPassword("");
        onSignedIn();
      }
    });

  const activate = () =>
    run(async () => {
      const answer = await post<{ recovery_codes: string[] }>("/console/api/mfa/activate", {
        code,
      });
      setCode("");
      setStep({ kind: "recovery", codes: answer.recovery_codes });
    });

  return (
    <main class="sign-in" aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Traitgate console</h1>
      {ended && step.kind === "password" ? (
        <p class="notice" role="status">
          Your session has ended. Sign in again.
        </p>
      ) : null}
      {step.kind === "password" ? (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void signIn("");
          }}
        >
          <h2>Sign in</h2>
          {formError(error, ["username", "password"])}
          <Field
            id="username"
            label="Username"
            value={username}
            onInput={setUsername}
            autocomplete="username"
            error={fieldError(error, "username")}
          />
          <Field
            id="password"
            label="Password"
            type="password"
            value={password}
            onInput={setPassword}
            autocomplete="current-password"
            error={fieldError(error, "password")}
          />
          <button type="submit" disabled={busy}>
            Sign in
          </button>
        </form>
      ) : null}
      {step.kind === "mfa" ? (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void signIn(code);
          }}
        >
          <h2>Second factor</h2>
          <p>Enter the six-digit code from your authenticator app (or a recovery code).</p>
          {formError(error, ["totp_code"])}
          <Field
            id="totp_code"
            label="Code"
            value={code}
            onInput={setCode}
            autocomplete="one-time-code"
            inputMode="numeric"
            error={fieldError(error, "totp_code")}
          />
          <button type="submit" disabled={busy}>
            Continue
          </button>
        </form>
      ) : null}
      {step.kind === "enrol" ? (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            void activate();
          }}
        >
          <h2>Set up a second factor</h2>
          <p>
            This platform requires one. Scan the code with an authenticator app, or type the key.
          </p>
          <QrCode text={step.otpauthUri} label="QR code of your authenticator key" />
          <p>
            Key: <code class="secret">{step.secret}</code>
          </p>
          {formError(error, ["code"])}
          <Field
            id="code"
            label="First code from the app"
            value={code}
            onInput={setCode}
            autocomplete="one-time-code"
            inputMode="numeric"
            error={fieldError(error, "code")}
          />
          <button type="submit" disabled={busy}>
            Turn on
          </button>
        </form>
      ) : null}
      {step.kind === "recovery" ? (
        <section aria-labelledby="recovery-title">
          <h2 id="recovery-title">Recovery codes</h2>
          <p>
            Keep these codes somewhere safe: each signs you in once if you lose your authenticator.
            They are shown only now.
          </p>
          <ul class="codes">
            {step.codes.map((c) => (
              <li key={c}>
                <code>{c}</code>
              </li>
            ))}
          </ul>
          <button type="button" onClick={() => setStep({ kind: "mfa" })}>
            I have saved them: sign in
          </button>
        </section>
      ) : null}
    </main>
  );
}

/** The API key to act with: the console shows its scopes once accepted. */
export function ApiKeyStep({
  session,
  onDone,
  onSignOut,
}: {
  session: SessionInfo;
  onDone: () => void;
  onSignOut: () => void;
}) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<ShownError | undefined>();
  const [busy, setBusy] = useState(false);
  return (
    <main class="sign-in" aria-labelledby="key-title">
      <h1 id="key-title">Traitgate console</h1>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setBusy(true);
          setError(undefined);
          try {
            await post("/console/api/api-key", { api_key: key });
            setKey("");
            onDone();
          } catch (err) {
            setError(shownError(err));
          } finally {
            setBusy(false);
          }
        }}
      >
        <h2>API key</h2>
        <p>
          Signed in as <strong>{session.user?.username}</strong>. Administrative calls also need an
          API key: paste the one you act with. It stays on the server.
        </p>
        {error && error.field !== "api_key" ? <ErrorBox error={error} /> : null}
        <Field
          id="api_key"
          label="API key"
          type="password"
          value={key}
          onInput={setKey}
          error={fieldError(error, "api_key")}
        />
        <button type="submit" disabled={busy}>
          Continue
        </button>{" "}
        <button type="button" class="secondary" onClick={onSignOut}>
          Sign out
        </button>
      </form>
    </main>
  );
}
