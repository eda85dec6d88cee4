import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { generateSync } from "otplib";
import { chromium } from "playwright-core";
import { loadConfig } from "../src/config.js";
import { defaultAssetsDir } from "../src/console/static.js";
import { createLogger, silentLogger } from "../src/log.js";
import { startCore } from "../src/platform.js";
import { openDatabase } from "../src/storage/index.js";

/**
 * The admin console in headless chromium (Debian's, as the browser tests use): the sign-in
 * page's first render (navigation to the sign-in form shown, a fresh browser context each
 * time: nothing cached) and a settings save (select, Save, the confirmation shown), against an
 * in-process core on embedded PGlite. Also the bundle's gzipped size (budget 150 KB).
 * CONSOLE_BENCH_ROUNDS per measure (default 20).
 */

const rounds = Number(process.env.CONSOLE_BENCH_ROUNDS ?? 20);
const chromiumPath = "/usr/bin/chromium";

const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
const row = (name: string, ms: number[]) => {
  const s = [...ms].sort((a, b) => a - b);
  return `| ${name} | ${s.length} | ${pct(s, 50).toFixed(1)} | ${pct(s, 95).toFixed(1)} | ${(s.at(-1) ?? 0).toFixed(1)} |`;
};

export async function benchConsole(): Promise<string> {
  const assets = defaultAssetsDir();
  const js = readFileSync(join(assets, "app.js"));
  const css = readFileSync(join(assets, "app.css"));
  const size = `Bundle: app.js ${(js.length / 1024).toFixed(1)} KB (${(gzipSync(js).length / 1024).toFixed(1)} KB gzipped), app.css ${(gzipSync(css).length / 1024).toFixed(1)} KB gzipped.`;
  if (!existsSync(chromiumPath))
    return `## Admin console\n\n${size}\n\nSkipped: ${chromiumPath} is missing.`;

  const env = {
    JWT_SECRET: "bench-console-secret-0123456789-abcdefgh",
    DATA_ENCRYPTION_KEY: Buffer.alloc(32, 9).toString("base64"),
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "warn",
  };
  const { config } = loadConfig(env);
  const db = await openDatabase({ dataDir: "memory://", log: silentLogger });
  // Its own quiet logger: the settings saves below change the core's log level.
  const log = createLogger({ level: "warn", destination: { write: () => undefined } });
  const core = await startCore({ config, log, db, env });
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    args: [
      "--no-sandbox",
      "--headless",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const url = core.server.url;
    const password = "Bench-console-Pass-3381";
    await core.identity.createUser({ username: "bench", email: "", password, roles: ["admin"] });
    const post = async (path: string, body: unknown, token?: string) =>
      (await (
        await fetch(`${url}${path}`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            ...(token ? { authorization: `Bearer ${token}` } : {}),
          },
          body: JSON.stringify(body),
        })
      ).json()) as Record<string, string>;
    const { token } = await post("/auth/login", { username: "bench", password });
    const { secret } = await post("/auth/mfa/enroll", {}, token);
    await post("/auth/mfa/activate", { code: generateSync({ secret: secret ?? "" }) }, token);
    const { key } = await core.apiKeys.create(
      { type: "system" },
      { requestId: null },
      { name: "bench", scopes: ["settings:read", "settings:write"] },
    );

    const firstRender: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const context = await browser.newContext();
      const page = await context.newPage();
      const started = performance.now();
      await page.goto(`${url}/console/`);
      await page.getByRole("heading", { name: "Sign in" }).waitFor();
      firstRender.push(performance.now() - started);
      await context.close();
    }

    const page = await (await browser.newContext()).newPage();
    await page.goto(`${url}/console/`);
    await page.getByLabel("Username").fill("bench");
    await page.getByLabel("Password").fill(password);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page
      .getByLabel("Code", { exact: true })
      .fill(generateSync({ secret: secret ?? "", epoch: Math.floor(Date.now() / 1000) + 30 }));
    await page.getByRole("button", { name: "Continue" }).click();
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Continue" }).click();
    await page.getByRole("link", { name: "Settings" }).click();
    const level = page.getByLabel("log_level");
    await level.waitFor();
    const save: number[] = [];
    for (let i = 0; i < rounds; i++) {
      await level.selectOption(i % 2 === 0 ? "warn" : "info");
      const started = performance.now();
      await page.getByRole("button", { name: /^Save/ }).click();
      await page.getByText(new RegExp(`Saved \\(version ${i + 1}\\)`)).waitFor();
      save.push(performance.now() - started);
      await page.getByLabel("log_level").waitFor();
    }
    return [
      "## Admin console (headless chromium, in-process core on PGlite)",
      "",
      size,
      "",
      "| measure | rounds | p50 ms | p95 ms | max ms |",
      "|---|---|---|---|---|",
      row("sign-in page first render (fresh context)", firstRender),
      row("settings save (click to confirmation)", save),
    ].join("\n");
  } finally {
    await browser.close();
    await core.close();
    await db.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) console.log(await benchConsole());
