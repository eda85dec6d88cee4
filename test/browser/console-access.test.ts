import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  axeViolations,
  browserAvailable,
  consolePost,
  enrolMfa,
  launchBrowser,
  screenshot,
  signIn,
  totp,
} from "../support/browser.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The console in a real browser (issue 15, acceptance 1, 5 and 6): an admin with MFA signs
 * in and sees the overview; an auditor sees read-only pages and the API refuses what they
 * hide; a viewer gets "no access"; the page never holds a token or key; the cookie is HttpOnly
 * and SameSite=Strict; cross-origin requests are refused; sign-out kills the cookie; CSP holds.
 */
describe.runIf(browserAvailable())("admin console: sign-in and access", () => {
  let server: TestServer;
  let browser: Browser;
  let adminKey: string;
  let auditorKey: string;
  let mfaSecret: string;
  /** log_level as the server started (the console tests must leave it so). */
  let logLevel: unknown;
  const users = {
    admin: { username: "ada", password: "Ada-console-Pass-2931" },
    auditor: { username: "audrey", password: "Audrey-ledger-Pass-8812" },
    viewer: { username: "vic", password: "Vic-reader-Pass-4470" },
  };

  beforeAll(async () => {
    server = await startTestServer();
    await server.createUser(users.admin.username, users.admin.password, ["admin"]);
    await server.createUser(users.auditor.username, users.auditor.password, ["auditor"]);
    await server.createUser(users.viewer.username, users.viewer.password, ["viewer"]);
    mfaSecret = (await enrolMfa(server.url, users.admin.username, users.admin.password)).secret;
    adminKey = await server.createApiKey(
      [
        "settings:read",
        "settings:write",
        "audit:read",
        "api_keys:read",
        "api_keys:write",
        "plugins:read",
        "operator:read",
      ],
      { name: "ada console" },
    );
    auditorKey = await server.createApiKey(["settings:read", "audit:read"], { name: "audit" });
    logLevel = server.core.settings.current().values.log_level;
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  /** CSP violations and script errors the page reports. */
  function watchProblems(page: Page): string[] {
    const problems: string[] = [];
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(m.text());
    });
    page.on("pageerror", (e) => problems.push(e.message));
    return problems;
  }

  describe("an admin with MFA", () => {
    let context: BrowserContext;
    let page: Page;
    let problems: string[];

    beforeAll(async () => {
      context = await browser.newContext();
      page = await context.newPage();
      problems = watchProblems(page);
    });
    afterAll(() => context.close());

    it("is sent from / to /console/, under security headers", async () => {
      const res = await page.goto(`${server.url}/`);
      expect(new URL(page.url()).pathname).toBe("/console/");
      const headers = res?.headers() ?? {};
      expect(headers["content-security-policy"]).toContain("default-src 'self'");
      expect(headers["content-security-policy"]).toContain("frame-ancestors 'none'");
      expect(headers["content-security-policy"]).not.toContain("unsafe-inline");
      expect(headers["x-content-type-options"]).toBe("nosniff");
      expect(headers["referrer-policy"]).toBe("no-referrer");
      await page.getByRole("heading", { name: "Sign in" }).waitFor();
      await screenshot(page, "sign-in");
      expect(await axeViolations(page)).toEqual([]);
    });

    it("signs in with password, TOTP code and API key and sees the overview", async () => {
      await page.getByLabel("Username").fill(users.admin.username);
      await page.getByLabel("Password").fill(users.admin.password);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Second factor" }).waitFor();
      await page.getByLabel("Code", { exact: true }).fill(totp(mfaSecret, 1));
      await page.getByRole("button", { name: "Continue" }).click();
      await page.getByRole("heading", { name: "API key" }).waitFor();
      await page.getByLabel("API key").fill(adminKey);
      await page.getByRole("button", { name: "Continue" }).click();
      await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
      await page.getByText("Serving: the core answers and its database too.").waitFor();
      await page.getByText(/event #\d+/).waitFor();
      expect(await navLinks(page)).toEqual([
        "Overview",
        "Settings",
        "API keys",
        "Plugins",
        "Audit",
        "Operator calls",
        "Users",
        "RAG",
        "Policy",
      ]);
      await screenshot(page, "overview");
      expect(await axeViolations(page)).toEqual([]);
      expect(problems).toEqual([]);
    });

    it("leaves no token or key where the page's scripts can read them", async () => {
      const storage = await page.evaluate(() => {
        // The page's globals (this file is compiled without the DOM's types).
        const w = globalThis as unknown as {
          localStorage: object;
          sessionStorage: object;
          document: { cookie: string };
        };
        return {
          local: JSON.stringify({ ...w.localStorage }),
          session: JSON.stringify({ ...w.sessionStorage }),
          cookie: w.document.cookie,
        };
      });
      expect(storage).toEqual({ local: "{}", session: "{}", cookie: "" });
      expect(await page.content()).not.toContain(adminKey);
      const cookies = await context.cookies(server.url);
      expect(cookies).toHaveLength(1);
      expect(cookies[0]).toMatchObject({ name: "tg_console", httpOnly: true, sameSite: "Strict" });
      expect(cookies[0]?.value).toMatch(/^[A-Za-z0-9_-]{43}$/);
    });

    it("refuses requests from another origin that carry the cookie", async () => {
      const cookie = (await context.cookies(server.url))[0];
      const header = `${cookie?.name}=${cookie?.value}`;
      // From Node, as another site would: a foreign Origin, or no console header.
      const foreign = await consolePost(server.url, "/console/api/sign-out", header, {
        origin: "http://evil.example",
      });
      expect(foreign).toMatchObject({ status: 403, body: { reason: "CSRF_ORIGIN" } });
      const noHeader = await consolePost(server.url, "/console/api/sign-out", header, {
        header: false,
      });
      expect(noHeader).toMatchObject({ status: 403, body: { reason: "CSRF_HEADER_MISSING" } });
      const rpc = await consolePost(
        server.url,
        "/console/rpc/traitgate.settings.v1.SettingsService/UpdateSettings",
        header,
        {
          origin: "http://evil.example",
          body: { values: { log_level: "warn" } },
        },
      );
      expect(rpc.status).toBe(403);

      // From a page of another origin on the same host (same site: the browser sends the cookie).
      const evil = await foreignSite(server.url);
      try {
        const attacker = await context.newPage();
        await attacker.goto(evil.url);
        await attacker.getByText("sent").waitFor();
        await attacker.close();
      } finally {
        await new Promise((r) => evil.server.close(r));
      }
      // Still signed in, settings unchanged.
      await page.reload();
      await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
      expect(server.core.settings.current().values.log_level).toBe(logLevel);
      expect(server.logs.join("\n")).toContain("console_csrf_refused");
    });

    it("signs out, after which the old cookie is useless", async () => {
      const cookie = (await context.cookies(server.url))[0];
      const header = `${cookie?.name}=${cookie?.value}`;
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByRole("heading", { name: "Sign in" }).waitFor();
      expect(await context.cookies(server.url)).toEqual([]);
      const session = await consolePost(server.url, "/console/api/session", header);
      expect(session.body.stage).toBe("signed_out");
      const rpc = await consolePost(
        server.url,
        "/console/rpc/traitgate.settings.v1.SettingsService/GetSettings",
        header,
      );
      expect(rpc.status).toBe(401);
      const events = await server.core.db.query<{
        action: string;
        outcome: string;
        client_address: string | null;
        user_agent: string | null;
      }>(
        "SELECT action, outcome, client_address, user_agent FROM audit_events WHERE action LIKE 'console_%' ORDER BY seq",
      );
      expect(events.rows.map((e) => `${e.action}:${e.outcome}`)).toEqual([
        "console_sign_in:success",
        "console_sign_out:success",
      ]);
      // The browser's address and user agent, as on every event a request causes.
      for (const e of events.rows) {
        expect(e.client_address).toBe("127.0.0.1");
        expect(e.user_agent).toMatch(/Chrome/);
      }
    });
  });

  describe("an auditor", () => {
    let context: BrowserContext;
    let page: Page;

    beforeAll(async () => {
      context = await browser.newContext();
      page = await context.newPage();
      await signIn(page, server.url, { ...users.auditor, apiKey: auditorKey });
      await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
    });
    afterAll(() => context.close());

    it("sees read-only pages: audit, settings, no API keys", async () => {
      expect(await navLinks(page)).toEqual(["Overview", "Settings", "Audit", "Operator calls"]);
      // The overview's audit chain state (no signed checkpoint: AUDIT_CHECKPOINT_KEY unset),
      // and no plugin card: plugins are not the auditor's.
      await page
        .locator("#chain-verification", { hasText: /^Verified: \d+ events from the first event/ })
        .waitFor();
      await page.locator("#chain-checkpoint", { hasText: /^none/ }).waitFor();
      expect(await page.getByRole("region", { name: "Plugins" }).count()).toBe(0);
      await page.getByRole("link", { name: "Settings" }).click();
      await page.getByText(/Read-only/).waitFor();
      expect(await page.getByRole("button", { name: /^Save/ }).count()).toBe(0);
      expect(await page.getByLabel("log_level").isDisabled()).toBe(true);
      await screenshot(page, "settings-read-only");
      expect(await axeViolations(page)).toEqual([]);
      await page.getByRole("link", { name: "Audit" }).click();
      await page.getByRole("button", { name: "Export as JSON lines" }).waitFor();
      await page.locator("table.events tbody tr").first().waitFor();
      await page.locator("#chain-verification", { hasText: /^Verified: / }).waitFor();
      expect(await axeViolations(page)).toEqual([]);
    });

    it("is refused by the API, with the same session, what the console hides", async () => {
      const call = (rpc: string, body: unknown) =>
        page.evaluate(
          async ({ rpc, body }) => {
            const res = await fetch(`/console/rpc/${rpc}`, {
              method: "POST",
              headers: {
                "content-type": "application/json",
                "x-traitgate-console": "1",
                "connect-protocol-version": "1",
              },
              body: JSON.stringify(body),
            });
            const json = (await res.json()) as { details?: { debug?: { reason?: string } }[] };
            return { status: res.status, reason: json.details?.[0]?.debug?.reason ?? "" };
          },
          { rpc, body },
        );
      // The settings page is the auditor's, its save button is not: the service refuses (role).
      expect(
        await call("traitgate.settings.v1.SettingsService/UpdateSettings", {
          values: { log_level: "warn" },
        }),
      ).toEqual({
        status: 403,
        reason: "ROLE",
      });
      expect(server.core.settings.current().values.log_level).toBe(logLevel);
      // A page the auditor does not have: the console does not even pass the call on.
      expect(await call("traitgate.admin.v1.ApiKeyService/ListApiKeys", {})).toEqual({
        status: 403,
        reason: "CONSOLE_PAGE",
      });
      expect(
        await call("traitgate.gateway.v1.PluginRegistryService/CheckPluginReachability", {}),
      ).toEqual({ status: 403, reason: "CONSOLE_PAGE" });
    });

    it("is signed out at once when deactivated", async () => {
      const rows = await server.core.db.query<{ id: string }>(
        "SELECT id FROM users WHERE username = $1",
        [users.auditor.username],
      );
      await server.core.identity.setActive(rows.rows[0]?.id as string, false);
      await page.reload();
      await page.getByText("Your session has ended. Sign in again.").waitFor();
      await server.core.identity.setActive(rows.rows[0]?.id as string, true);
    });
  });

  it("shows a viewer the no-access page, and the services stay shut", async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await signIn(page, server.url, users.viewer);
      await page.getByRole("heading", { name: "No access to the console" }).waitFor();
      await screenshot(page, "no-access");
      expect(await axeViolations(page)).toEqual([]);
      const status = await page.evaluate(async () => {
        const res = await fetch("/console/rpc/traitgate.admin.v1.AuditService/ListAuditEvents", {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-traitgate-console": "1",
            "connect-protocol-version": "1",
          },
          body: "{}",
        });
        return res.status;
      });
      expect(status).toBe(403);
    } finally {
      await context.close();
    }
  });
});

const navLinks = (page: Page) =>
  page.getByRole("navigation", { name: "Console" }).getByRole("link").allTextContents();

/** A page on another origin of the same host that tries to use the console's cookie. */
async function foreignSite(target: string): Promise<{ url: string; server: Server }> {
  const script = `
    const t = ${JSON.stringify(target)};
    Promise.allSettled([
      fetch(t + "/console/api/sign-out", { method: "POST", mode: "no-cors", credentials: "include",
        headers: { "content-type": "text/plain" }, body: "{}" }),
      fetch(t + "/console/rpc/traitgate.settings.v1.SettingsService/UpdateSettings", { method: "POST",
        mode: "no-cors", credentials: "include", headers: { "content-type": "text/plain" },
        body: JSON.stringify({ values: { log_level: "warn" } }) }),
      fetch(t + "/console/api/sign-out", { method: "POST", credentials: "include",
        headers: { "content-type": "application/json", "x-traitgate-console": "1" }, body: "{}" }),
    ]).then(() => { document.body.textContent = "sent"; });`;
  const server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(`<!doctype html><html><body>sending<script>${script}</script></body></html>`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, server };
}
