import type { JSX } from "preact";
import { useEffect, useRef } from "preact/hooks";
import type { SessionInfo } from "./api.js";
import { type PageProps, pageTable } from "./pages.js";
import { usePath } from "./router.js";

/** Header, navigation from the policy's UI features, and the page. */
export function Shell({ session, onSignOut }: { session: SessionInfo; onSignOut: () => void }) {
  const [path, go] = usePath();
  const pages = pageTable.filter((p) => session.pages?.includes(p.id));
  const current = pages.find((p) => p.path === path) ?? pages[0];
  const heading = useRef<HTMLHeadingElement>(null);
  // Moving to a page puts the focus on its title (screen readers announce it).
  useEffect(() => heading.current?.focus(), [current?.id]);
  const scopes = session.api_key?.scopes ?? [];
  const props: PageProps = {
    session,
    can: (scope) => scopes.includes(scope),
    has: (feature) => session.features?.includes(feature) === true,
    shows: (page) => session.pages?.includes(page) === true,
  };
  const Page = current?.component as ((p: PageProps) => JSX.Element) | undefined;
  return (
    <div class="shell">
      <header class="top">
        <span class="brand">Traitgate console</span>
        <div class="who">
          <span>
            {session.user?.username} ({session.user?.roles.join(", ")})
            {session.mfa ? <span class="badge">MFA</span> : null}
          </span>
          <details class="scopes">
            <summary>API key scopes</summary>
            <ul>
              {scopes.map((s) => (
                <li key={s}>
                  <code>{s}</code>
                </li>
              ))}
            </ul>
          </details>
          <button type="button" class="secondary" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      <nav aria-label="Console" class="side">
        <ul>
          {pages.map((p) => (
            <li key={p.id}>
              <a
                href={p.path}
                aria-current={p.id === current?.id ? "page" : undefined}
                onClick={(e) => {
                  e.preventDefault();
                  go(p.path);
                }}
              >
                {p.label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main class="page" aria-labelledby="page-title">
        <h1 id="page-title" tabIndex={-1} ref={heading}>
          {current?.label}
        </h1>
        {Page ? <Page {...props} /> : null}
      </main>
    </div>
  );
}
