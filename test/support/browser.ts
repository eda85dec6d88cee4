import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateSync } from "otplib";
import { type Browser, chromium, type Page } from "playwright-core";
import { expect } from "vitest";
import { callJson } from "./http.js";

/** Debian's chromium (`apt-get install -y chromium`; .ci/run installs it). */
export const chromiumPath = "/usr/bin/chromium";

/**
 * True when the browser tests can run. Without chromium they are skipped with a message,
 * except on CI, where a missing browser is an error.
 */
export function browserAvailable(): boolean {
  if (existsSync(chromiumPath)) return true;
  if (process.env.CI) {
    throw new Error(`${chromiumPath} is missing: .ci/run must install chromium before the tests`);
  }
  console.warn(
    `Browser tests skipped: ${chromiumPath} is missing (apt-get install -y chromium to run them).`,
  );
  return false;
}

/** Headless chromium with a fresh profile (each context starts empty). */
export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
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
}

/** A TOTP code of `secret`, `steps` periods of 30 s from now. */
export const totp = (secret: string, steps = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

/** Turns MFA on for a user over REST; returns the TOTP secret and the recovery codes. */
export async function enrolMfa(
  url: string,
  username: string,
  password: string,
): Promise<{ secret: string; recoveryCodes: string[] }> {
  const login = await callJson(url, "/auth/login", { username, password });
  const token = login.body.token as string;
  const enrol = await callJson(url, "/auth/mfa/enroll", {}, { token });
  const secret = enrol.body.secret as string;
  const activate = await callJson(url, "/auth/mfa/activate", { code: totp(secret) }, { token });
  expect(activate.status, JSON.stringify(activate.body)).toBe(200);
  return { secret, recoveryCodes: activate.body.recovery_codes as string[] };
}

/** Fills the sign-in form; then the code (if given) and the API key (if given). */
export async function signIn(
  page: Page,
  baseUrl: string,
  user: { username: string; password: string; code?: string; apiKey?: string },
): Promise<void> {
  await page.goto(`${baseUrl}/console/`);
  await page.getByLabel("Username").fill(user.username);
  await page.getByLabel("Password").fill(user.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  if (user.code !== undefined) {
    await page.getByLabel("Code", { exact: true }).fill(user.code);
    await page.getByRole("button", { name: "Continue" }).click();
  }
  if (user.apiKey !== undefined) {
    await page.getByLabel("API key").fill(user.apiKey);
    await page.getByRole("button", { name: "Continue" }).click();
  }
}

const require = createRequire(import.meta.url);
const axePath = require.resolve("axe-core/axe.min.js");

/**
 * Runs axe-core in the page (injected with addScriptTag) and returns the serious and critical
 * violations, each as "rule: target".
 */
export async function axeViolations(page: Page): Promise<string[]> {
  // Served as a same-origin script by the browser itself (the CSP refuses inline scripts and
  // other origins; the server has no test route).
  const url = new URL("/console/assets/axe-under-test.js", page.url()).href;
  await page.route(url, (route) =>
    route.fulfill({ body: readFileSync(axePath, "utf8"), contentType: "text/javascript" }),
  );
  await page.addScriptTag({ url });
  const violations = await page.evaluate(async () => {
    const axe = (
      globalThis as unknown as {
        axe: {
          run(): Promise<{
            violations: { id: string; impact: string; nodes: { target: string[] }[] }[];
          }>;
        };
      }
    ).axe;
    const result = await axe.run();
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      targets: v.nodes.map((n) => n.target.join(" ")),
    }));
  });
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id}: ${v.targets.join(", ")}`);
}

const docsDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "docs", "console");

/**
 * A screenshot for docs/console.md: written there when UPDATE_SCREENSHOTS=1, else to a
 * temporary folder (a test run leaves the committed pictures as they are).
 */
export async function screenshot(page: Page, name: string): Promise<void> {
  const dir =
    process.env.UPDATE_SCREENSHOTS === "1" ? docsDir : join(tmpdir(), "traitgate-screenshots");
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: join(dir, `${name}.png`), fullPage: true });
}

/** POST to the console's own paths from Node, as a browser of `origin` with the cookie would. */
export async function consolePost(
  baseUrl: string,
  path: string,
  cookie: string,
  options: { origin?: string; header?: boolean; body?: unknown } = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      cookie,
      origin: options.origin ?? baseUrl,
      ...(options.header === false ? {} : { "x-traitgate-console": "1" }),
      "connect-protocol-version": "1",
    },
    body: JSON.stringify(options.body ?? {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}
