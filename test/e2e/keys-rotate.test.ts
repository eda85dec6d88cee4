import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateSync } from "otplib";
import { afterAll, describe, expect, it } from "vitest";
import { callJson } from "../support/http.js";

/**
 * `traitgate keys rotate` as an operator runs it (docs/encryption.md,
 * "Rotation"): MFA is set up under one key, the key is rotated, and the user
 * still logs in with a TOTP code once the old key is gone.
 */

const cli = join(import.meta.dirname, "../../src/cli.ts");
const dir = mkdtempSync(join(tmpdir(), "traitgate-rotate-"));
const children: ChildProcess[] = [];

afterAll(() => {
  for (const child of children) child.kill("SIGKILL");
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

function run(args: string[], environment: NodeJS.ProcessEnv) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", cli, ...args], {
      env: environment,
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => {
      stdout += c;
    });
    child.stderr.on("data", (c: Buffer) => {
      stderr += c;
    });
    child.stdin.end();
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** `traitgate serve` until `fn` is done; resolves with fn's result after a clean stop. */
async function withServer<T>(
  environment: NodeJS.ProcessEnv,
  fn: (url: string) => Promise<T>,
): Promise<T> {
  const child = spawn(process.execPath, ["--import", "tsx", cli, "serve"], { env: environment });
  children.push(child);
  const url = await new Promise<string>((resolve, reject) => {
    let output = "";
    child.stdout.on("data", (c: Buffer) => {
      output += c;
      const line = output.split("\n").find((l) => l.includes("traitgate listening"));
      if (line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.stderr.on("data", (c: Buffer) => {
      output += c;
    });
    child.on("exit", (code) => reject(new Error(`exited with ${code}: ${output}`)));
  });
  try {
    return await fn(url);
  } finally {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }
}

const code = (secret: string, steps = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

describe("traitgate keys rotate", () => {
  it("moves MFA secrets to the new key; TOTP login then works with the new key alone", async () => {
    const before = env({ DATA_ENCRYPTION_KEY: oldKey });
    const created = await run(["users", "create", "--username", "rita"], {
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

    const missing = await run(["keys", "rotate"], env({}));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("DATA_ENCRYPTION_KEY is required");

    const rotated = await run(
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
    const again = await run(["keys", "rotate"], after);
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
