import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:net";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allScopes } from "../../src/apikeys/scopes.js";
import { silentLogger } from "../../src/log.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { type RagPlugin, startRagPlugin } from "../../src/rag/plugin.js";
import { testHnsw } from "../rag/support.js";
import {
  axeViolations,
  browserAvailable,
  enrolMfa,
  launchBrowser,
  screenshot,
  signIn,
  totp,
} from "../support/browser.js";
import { pgliteTarget } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

const corpus = join(import.meta.dirname, "../../examples/corpus");

/**
 * The spec's setup sequence done in the console (issue 15, acceptance 2 and the rest of 4):
 * a service account for ai-core (its secret shown once), the RAG plugin registered from its
 * manifest (credentials shown once), ai-core allowlisted for rag_index and rag_query, Backend =
 * Plugin, the sample corpus ingested folder by folder; then a clinician and a viewer searching
 * get different results. Also the Policy page, and axe on every page it visits. Beyond the
 * acceptance: the plugin registered from the form (field errors next to the fields), its
 * reachability on the Plugins page and the Overview, the document and chunk counts of the
 * built-in store and of the plugin on the RAG page, and the audit chain's verification state.
 */
describe.runIf(browserAvailable())("admin console: the platform's setup", () => {
  let server: TestServer;
  let browser: Browser;
  let page: Page;
  let plugin: RagPlugin | undefined;
  let pluginPort = 0;
  const admin = { username: "ada", password: "Ada-console-Pass-2931" };
  const people = {
    clinician: { username: "dr-lee", password: "Lee-clinic-Pass-5521" },
    viewer: { username: "vic", password: "Vic-reader-Pass-4470" },
  };

  beforeAll(async () => {
    const checkpointKey = generateKeyPairSync("ed25519").privateKey.export({
      format: "pem",
      type: "pkcs8",
    });
    server = await startTestServer({
      env: { AUDIT_CHECKPOINT_KEY: String(checkpointKey), AUDIT_CHECKPOINT_INTERVAL_SECONDS: "0" },
    });
    await server.createUser(admin.username, admin.password, ["admin"]);
    await server.createUser(people.clinician.username, people.clinician.password, ["clinician"]);
    await server.createUser(people.viewer.username, people.viewer.password, ["viewer"]);
    const { secret } = await enrolMfa(server.url, admin.username, admin.password);
    const key = await server.createApiKey([...allScopes], { name: "ada console" });
    pluginPort = await freePort();
    browser = await launchBrowser();
    page = await (await browser.newContext()).newPage();
    await signIn(page, server.url, { ...admin, code: totp(secret, 1), apiKey: key });
    await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
  });

  afterAll(async () => {
    await browser?.close();
    await plugin?.close();
    await server?.close();
  });

  const openPage = async (name: string) => {
    await page
      .getByRole("navigation", { name: "Console" })
      .getByRole("link", { name, exact: true })
      .click();
    await page.getByRole("heading", { name, level: 1 }).waitFor();
  };

  it("creates the ai-core service account; its secret is shown once", async () => {
    await openPage("Users");
    await page.getByRole("cell", { name: admin.username }).waitFor();
    await page.getByLabel("Name", { exact: true }).fill("ai-core");
    await page.getByLabel("Description").fill("the platform's AI core");
    await page.getByRole("button", { name: "Create service account" }).click();
    const secret = (await page.locator("#client-secret").textContent()) ?? "";
    expect(secret.length).toBeGreaterThan(20);
    const token = await callJson(server.url, "/auth/token", {
      grant_type: "client_credentials",
      client_id: "ai-core",
      client_secret: secret,
    });
    expect(token.status, JSON.stringify(token.body)).toBe(200);
    await screenshot(page, "users");
    expect(await axeViolations(page)).toEqual([]);
    await page.reload();
    await page.getByRole("rowheader", { name: /^ai-core/ }).waitFor();
    expect(await page.content()).not.toContain(secret);
  });

  it("counts the built-in store's documents and chunks on the RAG page", async () => {
    await openPage("RAG");
    const counts = (text: string) => page.locator("#rag-counts", { hasText: text }).waitFor();
    await counts("Built-in store: 0 documents, 0 chunks.");
    await page.getByLabel("Or a folder").setInputFiles(join(corpus, "public"));
    await page.getByLabel("Classification").fill("public");
    await page.getByRole("button", { name: /^Ingest \d+ file/ }).click();
    await page.getByText(/(\d+) of \1 documents sent \((\d+) chunks/).waitFor();
    const sent = (await page.getByText(/documents sent/).textContent()) ?? "";
    const chunks = /\((\d+) chunks/.exec(sent)?.[1];
    await counts(`Built-in store: 2 documents, ${chunks} chunks.`);
  });

  it("registers the RAG plugin from its manifest, with field errors and credentials shown once", async () => {
    await openPage("Plugins");
    const manifest = (host: string) =>
      JSON.stringify({
        id: "rag",
        name: "Retrieval",
        plugin_type: "retrieval",
        host,
        port: pluginPort,
        endpoints: { rag_index: "/rag/index", rag_query: "/rag/query" },
        traits: ["compliance:hipaa"],
      });
    // Pasted JSON: a metadata address is refused, next to the manifest.
    await page.getByLabel("Paste JSON").check();
    await page.getByLabel("Manifest (JSON)").fill(manifest("169.254.169.254"));
    await page.getByRole("button", { name: "Register" }).click();
    await page.locator("#manifest-error").waitFor();
    expect(await page.locator("#manifest-error").textContent()).toMatch(/host/);
    expect(await server.core.plugins.exists("rag")).toBe(false);

    // The form: the same refusal next to the Host field, then registered once it is fixed.
    await page.getByLabel("Fill a form").check();
    await page.getByLabel("Id", { exact: true }).fill("rag");
    await page.getByLabel("Name", { exact: true }).fill("Retrieval");
    await page.getByLabel("Plugin type").fill("retrieval");
    await page.getByLabel("Host", { exact: true }).fill("169.254.169.254");
    await page.getByLabel("Port", { exact: true }).fill(String(pluginPort));
    await page
      .getByLabel("Endpoints")
      .fill(
        "rag_index /rag/index\nrag_query /rag/query\nrag_stats /traitgate.rag.v1.RagPluginService/Stats",
      );
    await page.getByLabel("Traits", { exact: true }).fill("compliance:hipaa");
    await page.getByRole("button", { name: "Register" }).click();
    const hostError = page.locator("#plugin-host-error");
    await hostError.waitFor();
    expect(await hostError.textContent()).toMatch(/^host: /);
    expect(await page.getByLabel("Host", { exact: true }).getAttribute("aria-invalid")).toBe(
      "true",
    );
    expect(await server.core.plugins.exists("rag")).toBe(false);
    await screenshot(page, "plugins-form-error");
    expect(await axeViolations(page)).toEqual([]);

    await page.getByLabel("Host", { exact: true }).fill("127.0.0.1");
    await page.getByRole("button", { name: "Register" }).click();
    const credential = (await page.locator("#plugin-credential").textContent()) ?? "";
    const coreSecret = (await page.locator("#plugin-core-secret").textContent()) ?? "";
    expect(credential).toMatch(/^tgp_/);
    expect((await server.core.plugins.get("rag")).manifest).toMatchObject({
      host: "127.0.0.1",
      port: pluginPort,
      traits: ["compliance:hipaa"],
      endpoints: {
        rag_index: "/rag/index",
        rag_query: "/rag/query",
        rag_stats: "/traitgate.rag.v1.RagPluginService/Stats",
      },
    });
    // Nothing listens on its port yet.
    const reach = (text: RegExp) =>
      page.locator('.reach[data-plugin="rag"]', { hasText: text }).waitFor();
    await reach(/^unreachable \(ECONNREFUSED\)/);
    plugin = await startRagPlugin({
      config: {
        ...loadRagConfig({ CORE_SECRET: coreSecret, PORT: String(pluginPort), HOST: "127.0.0.1" }),
        hnsw: testHnsw,
      },
      log: silentLogger,
      db: await pgliteTarget.open(),
    });
    await page.getByRole("rowheader", { name: /^rag/ }).waitFor();
    await page.getByRole("button", { name: "Check reachability" }).click();
    await reach(/^reachable \(HTTP 200, \d+ ms\)/);

    await page.getByLabel("Caller").fill("ai-core");
    await page.getByLabel("Target plugin").fill("rag");
    await page.getByLabel("Operations").fill("rag_index, rag_query, rag_stats");
    await page.getByRole("button", { name: "Allow" }).click();
    await page
      .getByRole("region", { name: "Operator allowlist" })
      .getByRole("cell", { name: "rag_index, rag_query, rag_stats" })
      .waitFor();
    await screenshot(page, "plugins");
    expect(await axeViolations(page)).toEqual([]);
    await page.reload();
    await page.getByRole("rowheader", { name: /^rag/ }).waitFor();
    const html = await page.content();
    expect(html).not.toContain(credential);
    expect(html).not.toContain(coreSecret);
  });

  it("sets Backend = Plugin and ingests the sample corpus with progress and the plugin's counts", async () => {
    await openPage("RAG");
    await page.getByRole("combobox", { name: "Backend" }).selectOption("plugin");
    await page.getByRole("combobox", { name: "Plugin", exact: true }).selectOption("rag");
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByText(/Saved: rag\.backend, rag\.plugin_id/).waitFor();
    expect(server.core.settings.current().values["rag.backend"]).toBe("plugin");
    await page.locator("#rag-counts", { hasText: "Plugin rag: 0 documents, 0 chunks." }).waitFor();

    const folders = [
      { folder: "public", traits: "", classification: "public", files: 2 },
      { folder: "staff", traits: "role:viewer", classification: "internal" },
      { folder: "clinical", traits: "role:clinician", classification: "internal", files: 2 },
    ];
    for (const f of folders) {
      await page.getByLabel("Or a folder").setInputFiles(join(corpus, f.folder));
      await page.getByLabel("Required traits").fill(f.traits);
      await page.getByLabel("Classification").fill(f.classification);
      await page.getByRole("button", { name: /^Ingest \d+ file/ }).click();
      await page.getByText(/(\d+) of \1 documents sent/).waitFor();
    }
    // The counts the plugin reports through the gateway (as ai-core, operation rag_stats).
    const stats = await plugin?.rag.stats();
    expect(stats?.documents).toBeGreaterThan(4);
    await page
      .locator("#rag-counts", {
        hasText: `Plugin rag: ${stats?.documents} documents, ${stats?.chunks} chunks.`,
      })
      .waitFor();
    await screenshot(page, "rag");
    expect(await axeViolations(page)).toEqual([]);
  });

  it("gives the clinician and the viewer different search results", async () => {
    const searchAs = async (user: { username: string; password: string }) => {
      const login = await callJson(server.url, "/auth/login", user);
      const res = await callJson(
        server.url,
        "/api/search",
        { q: "sepsis lactate antibiotics flu", top_k: 20 },
        { token: login.body.token as string },
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const items = res.body.items as { path: string }[];
      return [...new Set(items.map((i) => i.path.split("/")[0]))].sort();
    };
    expect(await searchAs(people.clinician)).toEqual(["clinical", "public", "staff"]);
    expect(await searchAs(people.viewer)).toEqual(["public", "staff"]);
  });

  it("shows plugin reachability and the audit chain's state on the overview and the audit page", async () => {
    await openPage("Overview");
    await page
      .getByRole("region", { name: "Plugins" })
      .getByText(/^reachable \(HTTP 200/)
      .waitFor();
    await page.locator("#chain-checkpoint", { hasText: /^none/ }).waitFor();
    await page
      .locator("#chain-verification", { hasText: /^Verified: \d+ events from the first event/ })
      .waitFor();

    const signed = await server.core.auditCheckpoints.checkpoint("interval");
    expect(signed).toBeDefined();
    await page.getByRole("button", { name: "Verify again" }).click();
    await page
      .locator("#chain-checkpoint", {
        hasText: new RegExp(`^valid: signs event #${signed?.seq} at `),
      })
      .waitFor();
    await page
      .locator("#chain-verification", {
        hasText: new RegExp(
          `^Verified: \\d+ events? after the signed checkpoint's head \\(event #${signed?.seq}\\)`,
        ),
      })
      .waitFor();
    await screenshot(page, "overview-state");
    expect(await axeViolations(page)).toEqual([]);

    await openPage("Audit");
    await page
      .locator("#chain-verification", {
        hasText: new RegExp(`after the signed checkpoint's head \\(event #${signed?.seq}\\)`),
      })
      .waitFor();
    expect(await axeViolations(page)).toEqual([]);
  });

  it("says when the plugin in use does not report counts", async () => {
    await server.core.plugins.register(
      { kind: "system", id: "" },
      { requestId: "test-rag2" },
      {
        id: "rag2",
        name: "Retrieval without counts",
        pluginType: "retrieval",
        endpoints: { rag_index: "/rag/index", rag_query: "/rag/query" },
        host: "127.0.0.1",
        port: pluginPort,
        traits: [],
      },
      false,
    );
    await openPage("RAG");
    await page.getByRole("combobox", { name: "Plugin", exact: true }).selectOption("rag2");
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByText(/Saved: rag\.plugin_id/).waitFor();
    await page
      .locator("#rag-counts", { hasText: "Plugin rag2: not reported by the plugin" })
      .waitFor();
  });

  it("shows the policy: versions, the trait tree and an Explain", async () => {
    await openPage("Policy");
    await page.getByText("active", { exact: true }).first().waitFor();
    await page.getByRole("button", { name: "Explain" }).click();
    await page.getByText(/^Decision:/).waitFor();
    expect(await page.locator(".decision-allow").textContent()).toBe("allow");
    await screenshot(page, "policy");
    expect(await axeViolations(page)).toEqual([]);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const address = s.address();
      s.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}
