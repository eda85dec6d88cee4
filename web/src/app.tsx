import { useEffect, useState } from "preact/hooks";
import { MfaNeeded, NoAccess } from "./access-pages.js";
import { getSession, post, type SessionInfo } from "./api.js";
import { onSessionEnded, type ShownError, shownError } from "./rpc.js";
import { Shell } from "./shell.js";
import { ApiKeyStep, SignIn } from "./sign-in.js";
import { ErrorBox, Loading } from "./ui.js";

/** The console: sign-in until the session is active, then the pages the policy allows. */
export function App() {
  const [session, setSession] = useState<SessionInfo | undefined>();
  const [error, setError] = useState<ShownError | undefined>();

  const reload = async () => {
    try {
      setSession(await getSession());
      setError(undefined);
    } catch (err) {
      setError(shownError(err));
    }
  };
  const signOut = async () => {
    await post("/console/api/sign-out").catch(() => undefined);
    setSession({ stage: "signed_out" });
  };

  useEffect(() => {
    onSessionEnded(() => setSession({ stage: "signed_out", ended: true }));
    void reload();
  }, []);

  if (error) {
    return (
      <main class="sign-in">
        <h1>Traitgate console</h1>
        <ErrorBox error={error} title="The console cannot start" />
        <button type="button" onClick={() => void reload()}>
          Try again
        </button>
      </main>
    );
  }
  if (session === undefined) return <Loading what="the console" />;
  if (session.stage === "signed_out" || session.stage === "enrol") {
    return <SignIn ended={session.ended === true} onSignedIn={() => void reload()} />;
  }
  if (session.stage === "api_key") {
    return (
      <ApiKeyStep session={session} onDone={() => void reload()} onSignOut={() => void signOut()} />
    );
  }
  if (session.access === "none")
    return <NoAccess session={session} onSignOut={() => void signOut()} />;
  if (session.access === "mfa_needed") {
    return <MfaNeeded session={session} onSignOut={() => void signOut()} />;
  }
  return <Shell session={session} onSignOut={() => void signOut()} />;
}
