import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  axeViolations,
  browserAvailable,
  launchBrowser,
  screenshot,
  signIn,
  totp,
} from "../support/browser.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Second factors in the console: an administrator without one gets only the page that sets
 * one up (the policy's ui-admin-console-mfa); with MFA_REQUIRED, sign-in itself enrols (QR
 * code, key, recovery codes shown once) and then asks for a fresh code.
 */
describe.runIf(browserAvailable())("admin console: second factors", () => {
  let server: TestServer;
  let browser: Browser;
  let key: string;

  beforeAll(async () => {
    server = await startTestServer();
    key = await server.createApiKey(["settings:read", "audit:read"], { name: "console" });
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  async function newPage(): Promise<Page> {
    return (await browser.newContext()).newPage();
  }

  /** Turns the authenticator on from the QR page: returns the key read from the page. */
  async function scanAndTurnOn(page: Page): Promise<string> {
    await page.getByRole("img", { name: "QR code of your authenticator key" }).waitFor();
    const secret = ((await page.locator("code.secret").textContent()) ?? "").trim();
    expect(secret).toMatch(/^[A-Z2-7]{16,}$/);
    await page.getByLabel("First code from the app").fill(totp(secret));
    await page.getByRole("button", { name: "Turn on" }).click();
    await page.getByRole("heading", { name: "Recovery codes" }).waitFor();
    expect(await page.locator(".codes li").count()).toBe(10);
    return secret;
  }

  it("keeps an admin without a second factor to the set-up page, then lets them in", async () => {
    const admin = { username: "nomfa", password: "Nomfa-admin-Pass-6610" };
    await server.createUser(admin.username, admin.password, ["admin"]);
    const page = await newPage();
    await signIn(page, server.url, admin);
    await page.getByRole("heading", { name: "A second factor is needed" }).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    const status = await page.evaluate(async () => {
      const res = await fetch("/console/rpc/traitgate.settings.v1.SettingsService/GetSettings", {
        method: "POST",
        headers: { "content-type": "application/json", "x-traitgate-console": "1" },
        body: "{}",
      });
      return res.status;
    });
    expect(status).toBe(403);
    await page.getByRole("button", { name: "Set up an authenticator app" }).click();
    const secret = await scanAndTurnOn(page);
    await screenshot(page, "mfa-recovery-codes");
    await page.getByRole("button", { name: "Sign out" }).click();
    await signIn(page, server.url, { ...admin, code: totp(secret, 1), apiKey: key });
    await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
  });

  it("enrols at sign-in when MFA is required, then asks for a fresh code", async () => {
    await server.core.settingsAdmin.update(
      { kind: "system", userId: "test", username: "test", apiKeyId: undefined },
      { requestId: "console-mfa-test" },
      { values: { "auth.mfa_required": true } },
    );
    await server.core.settings.refresh();
    const admin = { username: "newadmin", password: "Newadmin-Pass-7720" };
    await server.createUser(admin.username, admin.password, ["admin"]);
    const page = await newPage();
    await signIn(page, server.url, admin);
    await page.getByRole("heading", { name: "Set up a second factor" }).waitFor();
    await screenshot(page, "mfa-enrol");
    expect(await axeViolations(page)).toEqual([]);
    const secret = await scanAndTurnOn(page);
    // The enrolment session is over: nothing of it is left in the browser.
    expect(await page.context().cookies(server.url)).toEqual([]);
    await page.getByRole("button", { name: "I have saved them: sign in" }).click();
    await page.getByLabel("Code", { exact: true }).fill(totp(secret, 1));
    await page.getByRole("button", { name: "Continue" }).click();
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Continue" }).click();
    await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
  });
});
