import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  axeViolations,
  browserAvailable,
  enrolMfa,
  launchBrowser,
  screenshot,
  signIn,
  totp,
} from "../support/browser.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * The console's pages in a real browser (issue 15, acceptance 3, 4, 7 and 8): settings live,
 * with the conflict view and field errors; an API key shown once and revoked; every change in
 * the audit page with the admin and the client address; gateway calls streamed live.
 */
describe.runIf(browserAvailable())("admin console pages", () => {
  let server: TestServer;
  let browser: Browser;
  let adminKey: string;
  let adminId: string;
  let mfa: { secret: string; recoveryCodes: string[] };
  const admin = { username: "ada", password: "Ada-console-Pass-2931" };
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    server = await startTestServer();
    adminId = await server.createUser(admin.username, admin.password, ["admin"]);
    mfa = await enrolMfa(server.url, admin.username, admin.password);
    adminKey = await server.createApiKey(
      [
        "settings:read",
        "settings:write",
        "audit:read",
        "api_keys:read",
        "api_keys:write",
        "plugins:read",
      ],
      { name: "ada console" },
    );
    browser = await launchBrowser();
  });

  afterAll(async () => {
    for (const c of contexts) await c.close();
    await browser?.close();
    await server?.close();
  });

  /** A new browser context signed in as the admin (a TOTP code, then recovery codes). */
  let signIns = 0;
  async function adminPage(): Promise<Page> {
    const context = await browser.newContext();
    contexts.push(context);
    const page = await context.newPage();
    const code = signIns === 0 ? totp(mfa.secret, 1) : (mfa.recoveryCodes[signIns] as string);
    signIns++;
    await signIn(page, server.url, { ...admin, code, apiKey: adminKey });
    await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
    return page;
  }

  const openPage = async (page: Page, name: string) => {
    await page.getByRole("navigation", { name: "Console" }).getByRole("link", { name }).click();
    await page.getByRole("heading", { name, level: 1 }).waitFor();
  };

  describe("settings", () => {
    let first: Page;
    let second: Page;

    beforeAll(async () => {
      [first, second] = [await adminPage(), await adminPage()];
      for (const p of [first, second]) {
        await openPage(p, "Settings");
        await p.getByLabel("log_level").waitFor();
      }
    });

    it("changes log_level, which takes effect at once", async () => {
      await first.getByLabel("log_level").selectOption("warn");
      await first.getByRole("button", { name: /^Save/ }).click();
      await first.getByText(/Saved \(version \d+\): log_level/).waitFor();
      expect(server.core.settings.current().values.log_level).toBe("warn");
      expect(await axeViolations(first)).toEqual([]);
    });

    it("shows a second editor the conflict, and re-applies their change on request", async () => {
      // The second page loaded the settings before the first one saved.
      await second.getByLabel("log_level").selectOption("info");
      await second.getByRole("button", { name: /^Save/ }).click();
      await second
        .getByRole("heading", { name: "Someone else changed the settings meanwhile" })
        .waitFor();
      const row = second.locator(".conflict tbody tr", { hasText: "log_level" });
      expect((await row.locator("td").allTextContents()).map((t) => t.trim())).toEqual([
        '"debug"',
        '"warn"',
        '"info"',
      ]);
      expect(server.core.settings.current().values.log_level).toBe("warn");
      await screenshot(second, "settings-conflict");
      expect(await axeViolations(second)).toEqual([]);
      await second.getByRole("button", { name: "Re-apply my changes" }).click();
      await second.getByText(/Saved \(version \d+\): log_level/).waitFor();
      expect(server.core.settings.current().values.log_level).toBe("info");
    });

    it("shows an invalid value's error next to its field and changes nothing", async () => {
      await first.reload();
      await first.getByLabel("rag.top_k_default").waitFor();
      const version = server.core.settings.current().version;
      await first.getByLabel("rag.top_k_default").fill("1000");
      await first.getByRole("button", { name: /^Save/ }).click();
      const error = first.locator("#setting-rag-top-k-default-error");
      await error.waitFor();
      expect(await error.textContent()).toContain("rag.top_k_default");
      expect(await first.getByLabel("rag.top_k_default").getAttribute("aria-invalid")).toBe("true");
      expect(server.core.settings.current().version).toBe(version);
      await screenshot(first, "settings-field-error");
    });
  });

  describe("API keys", () => {
    let page: Page;
    let created = "";

    beforeAll(async () => {
      page = await adminPage();
      await openPage(page, "API keys");
    });

    it("shows a new key once, with only the acting key's scopes on offer", async () => {
      const offered = await page
        .locator("fieldset input[type=checkbox]")
        .evaluateAll((els) => els.map((e) => (e as unknown as { value: string }).value));
      expect(offered).toEqual([
        "settings:read",
        "settings:write",
        "audit:read",
        "api_keys:read",
        "api_keys:write",
        "plugins:read",
      ]);
      await page.getByLabel("Name").fill("ci deploy");
      await page.getByRole("checkbox", { name: "audit:read" }).check();
      await page.getByRole("button", { name: "Create key" }).click();
      created = (await page.locator("#new-key").textContent()) ?? "";
      expect(created).toMatch(/^tgk_/);
      await page.getByRole("cell", { name: "ci deploy" }).waitFor();
      await screenshot(page, "api-key-created");
      expect(await axeViolations(page)).toEqual([]);
      const login = await callJson(server.url, "/auth/login", {
        ...admin,
        totp_code: mfa.recoveryCodes[9],
      });
      const token = login.body.token as string;
      const audit = { token, headers: { "x-api-key": created } };
      expect(
        (
          await callJson(server.url, "/api/admin/audit?page_size=1", undefined, {
            ...audit,
            method: "GET",
          })
        ).status,
      ).toBe(200);
      await page.reload();
      await page.getByRole("cell", { name: "ci deploy" }).waitFor();
      expect(await page.content()).not.toContain(created);
    });

    it("revokes a key after confirmation", async () => {
      const row = page.getByRole("row", { name: /ci deploy/ });
      await row.getByRole("button", { name: "Revoke" }).click();
      await row.getByRole("button", { name: "Confirm revoke" }).click();
      await row.getByRole("cell", { name: "revoked" }).waitFor();
      const login = await callJson(server.url, "/auth/login", {
        ...admin,
        totp_code: mfa.recoveryCodes[8],
      });
      const res = await callJson(server.url, "/api/admin/audit?page_size=1", undefined, {
        method: "GET",
        token: login.body.token as string,
        headers: { "x-api-key": created },
      });
      expect(res).toMatchObject({ status: 401, reason: "API_KEY_INVALID" });
    });
  });

  it("lists every change made in the console with the admin as actor and the client address", async () => {
    const page = await adminPage();
    await openPage(page, "Audit");
    await page.getByLabel("Action").fill("console_call");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.locator("table.events tbody tr").first().waitFor();
    const rows = await page
      .locator("table.events tbody tr")
      .evaluateAll((trs) =>
        trs.map((tr) =>
          Array.from((tr as unknown as { cells: ArrayLike<{ textContent: string }> }).cells, (c) =>
            c.textContent.trim(),
          ),
        ),
      );
    // Newest first: the revocation, the key's creation, the re-applied, refused and first saves.
    expect(rows.map((r) => [r[2], r[3], r[4], r[5], r[6]])).toEqual([
      [
        "console_call",
        `user ${adminId}`,
        "traitgate.admin.v1.ApiKeyService/RevokeApiKey",
        "success",
        "127.0.0.1",
      ],
      [
        "console_call",
        `user ${adminId}`,
        "traitgate.admin.v1.ApiKeyService/CreateApiKey",
        "success",
        "127.0.0.1",
      ],
      [
        "console_call",
        `user ${adminId}`,
        "traitgate.settings.v1.SettingsService/UpdateSettings",
        "failure",
        "127.0.0.1",
      ],
      [
        "console_call",
        `user ${adminId}`,
        "traitgate.settings.v1.SettingsService/UpdateSettings",
        "success",
        "127.0.0.1",
      ],
      [
        "console_call",
        `user ${adminId}`,
        "traitgate.settings.v1.SettingsService/UpdateSettings",
        "failure",
        "127.0.0.1",
      ],
      [
        "console_call",
        `user ${adminId}`,
        "traitgate.settings.v1.SettingsService/UpdateSettings",
        "success",
        "127.0.0.1",
      ],
    ]);
    // The services' own events of those changes, under the admin too.
    await page.getByLabel("Action").fill("settings_update");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByRole("cell", { name: "settings_update" }).first().waitFor();
    const updates = await page
      .locator("table.events tbody tr")
      .evaluateAll((trs) =>
        trs.map((tr) =>
          Array.from((tr as unknown as { cells: ArrayLike<{ textContent: string }> }).cells, (c) =>
            c.textContent.trim(),
          ),
        ),
      );
    // The invalid value, the re-applied save, the stale save, the first save.
    expect(updates.map((r) => [r[3], r[5]])).toEqual([
      [`user ${adminId}`, "failure"],
      [`user ${adminId}`, "success"],
      [`user ${adminId}`, "failure"],
      [`user ${adminId}`, "success"],
    ]);
    await screenshot(page, "audit");
    expect(await axeViolations(page)).toEqual([]);
  });

  it("streams a gateway call into the live operator-calls view", async () => {
    const page = await adminPage();
    await openPage(page, "Operator calls");
    await page.getByText("Live.").waitFor();
    const login = await callJson(server.url, "/auth/login", {
      ...admin,
      totp_code: mfa.recoveryCodes[7],
    });
    const call = await callJson(
      server.url,
      "/gateway/rag/query",
      { caller_plugin: "ai-core", payload: {} },
      { token: login.body.token as string },
    );
    expect(call.status).toBeGreaterThanOrEqual(400);
    const sent = Date.now();
    // The bound is one second; the wait allows for a loaded machine, the delay is logged.
    await page.locator("table.calls tbody tr", { hasText: "rag" }).waitFor({ timeout: 5_000 });
    console.info(`operator call shown ${Date.now() - sent} ms after the gateway answered`);
    await page.getByRole("button", { name: "Pause" }).click();
    await callJson(
      server.url,
      "/gateway/rag/query",
      { caller_plugin: "ai-core", payload: {} },
      { token: login.body.token as string },
    );
    await page.getByText("Paused: 1 new call held.").waitFor();
    expect(await page.locator("table.calls tbody tr").count()).toBe(1);
    await page.getByRole("button", { name: "Resume" }).click();
    await page.locator("table.calls tbody tr").nth(1).waitFor();
    await screenshot(page, "operator-calls");
    expect(await axeViolations(page)).toEqual([]);
  });
});
