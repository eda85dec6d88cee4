import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateSync } from "otplib";
import { afterAll, describe, expect, it } from "vitest";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import { callJson } from "../support/http.js";
import { seedDataDir } from "../support/pglite-templates.js";

/**
 * `traitgate keys rotate` as an operator runs it (docs/encryption.md,
 * "Rotation"): MFA is set up under one key, the key is rotated, and the user
 * still logs in with a TOTP code once the old key is gone.
 */

const dir = seedDataDir(mkdtempSync(join(tmpdir(), "traitgate-rotate-")));

afterAll(() => {
  killAll();
  rmSync(dir, { recursive: true, force: true });
});

const oldKey = Buffer.alloc(32, 5).toString("base64");
const newKey = Buffer.alloc(32, 6).toString("base64");
const password = "rotating-user-password";
const env = (keys: Record<string, string>): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  DATA_DIR: dir,
  PORT: "0",
  HOST: "127.0.0.1",
  JWT_SECRET: "keys-rotate-test-secret-0123456789-abcdef",
  ...keys,
});

/** `traitgate serve` until `fn` is done; resolves with fn's result after a clean stop. */
async function withServer<T>(
  environment: NodeJS.ProcessEnv,
  fn: (url: string) => Promise<T>,
): Promise<T> {
  const { child, output } = await startCli(["serve"], environment, /traitgate listening/);
  const url = listeningUrl(output());
  try {
    return await fn(url);
  } finally {
    await stopCli(child);
  }
}

const code = (secret: string, steps = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

describe("traitgate keys rotate", () => {
  it("moves MFA secrets to the new key; TOTP login then works with the new key alone", async () => {
    const before = env({ DATA_ENCRYPTION_KEY: oldKey });
    const created = await runCli(["users", "create", "--username", "rita"], {
      ...before,
      TRAITGATE_PASSWORD: password,
    });
    expect(created.code).toBe(0);

    const { secret, recoveryCodes } = await withServer(before, async (url) => {
      const login = await callJson(url, "/auth/login", { username: "rita", password });
      const token = login.body.token as string;
      const enrol = await callJson(url, "/auth/mfa/enroll", {}, { token });
      const secret = enrol.body.secret as string;
      const activate = await callJson(url, "/auth/mfa/activate", { code: code(secret) }, { token });
      expect(activate.status).toBe(200);
      return { secret, recoveryCodes: activate.body.recovery_codes as string[] };
    });

    const missing = await runCli(["keys", "rotate"], env({}));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("DATA_ENCRYPTION_KEY is required");

    const rotated = await runCli(
      ["keys", "rotate"],
      env({ DATA_ENCRYPTION_KEY: newKey, DATA_ENCRYPTION_KEY_PREVIOUS: oldKey }),
    );
    expect(rotated.code).toBe(0);
    expect(rotated.stderr).toMatch(/users\.mfa_secret: 1 checked, 1 resealed/);
    expect(rotated.stdout).toContain("users.mfa_secret: 1 checked, 1 resealed");
    const printed = rotated.stdout + rotated.stderr;
    for (const s of [secret, oldKey, newKey, ...recoveryCodes]) expect(printed).not.toContain(s);

    // The old key is gone: nothing is left to move, and the second factor still works.
    const after = env({ DATA_ENCRYPTION_KEY: newKey });
    const again = await runCli(["keys", "rotate"], after);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("users.mfa_secret: 1 checked, 0 resealed");
    expect(again.stdout).toContain("done: every sealed value is under key");

    await withServer(after, async (url) => {
      const withoutCode = await callJson(url, "/auth/login", { username: "rita", password });
      expect(withoutCode).toMatchObject({ status: 401, reason: "MFA_REQUIRED" });
      // Activation used the current step; the next step's code is within the window.
      const withCode = await callJson(url, "/auth/login", {
        username: "rita",
        password,
        totp_code: code(secret, 1),
      });
      expect(withCode.status).toBe(200);
    });
  });
});
