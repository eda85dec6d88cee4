import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.js";
import { seedDataDir } from "../support/pglite-templates.js";

/**
 * Help, version and exit codes as a shell sees them: separate processes with an environment
 * holding nothing but PATH and DATA_DIR. The whole command table is covered in process by
 * test/unit/cli-usage.test.ts; these check the process around it.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-cli-help-"));
  dirs.push(dir);
  return dir;
}

const bareEnv = (dataDir: string): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH,
  DATA_DIR: dataDir,
});

describe("traitgate help and version", () => {
  it("answers demo --help with its usage, without starting a demo or touching DATA_DIR", async () => {
    const dataDir = join(tempDir(), "data");
    const result = await runCli(["demo", "--help"], bareEnv(dataDir));
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("Usage: traitgate demo");
    expect(existsSync(dataDir)).toBe(false);
  }, 30_000);

  it("answers serve -h without any configuration", async () => {
    const result = await runCli(["serve", "-h"], bareEnv(join(tempDir(), "data")));
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("Usage: traitgate serve");
    expect(result.stderr).toBe("");
  }, 30_000);

  it("prints the package version for --version", async () => {
    const { version } = JSON.parse(
      readFileSync(join(import.meta.dirname, "../../package.json"), "utf8"),
    ) as { version: string };
    const result = await runCli(["--version"], bareEnv(tempDir()));
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(`traitgate ${version}`);
  }, 30_000);
});

describe("exit codes", () => {
  it.each([
    [["bogus"], 'unknown command "bogus"', "'traitgate --help'"],
    [["users", "create", "--bogus"], "--bogus", "'traitgate users create --help'"],
    [
      ["apikeys", "create", "--scope", "api_keys:read"],
      "--name",
      "'traitgate apikeys create --help'",
    ],
  ])(
    "%j is a usage error: 2, naming it on stderr",
    async (argv, problem, help) => {
      const result = await runCli(argv, bareEnv(join(tempDir(), "data")));
      expect(result.code).toBe(2);
      expect(result.stdout).toBe("");
      expect(result.stderr).toContain(problem);
      expect(result.stderr).toContain(help);
    },
    30_000,
  );

  it("is 2 for a missing setting, naming it", async () => {
    const result = await runCli(["keys", "rotate"], bareEnv(join(tempDir(), "data")));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("DATA_ENCRYPTION_KEY is required");
    expect(result.stderr).toContain("'traitgate keys rotate --help'");
  }, 30_000);
});

describe("commands ask only for what they use", () => {
  it("apikeys create needs neither JWT_SECRET nor DATA_ENCRYPTION_KEY", async () => {
    const result = await runCli(
      ["apikeys", "create", "--name", "first", "--scope", "api_keys:read"],
      bareEnv(seedDataDir(join(tempDir(), "data"))),
    );
    expect(result.stderr).not.toContain("JWT_SECRET");
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^tgk_\S+\n$/);
  }, 60_000);

  it("keys rotate on the demo's DATA_DIR finds the demo's encryption key", async () => {
    const dataDir = seedDataDir(join(tempDir(), "data"));
    mkdirSync(dataDir, { recursive: true });
    const file = join(dataDir, "demo-encryption.key");
    writeFileSync(file, `${Buffer.alloc(32, 9).toString("base64")}\n`, { mode: 0o600 });
    const result = await runCli(["keys", "rotate"], bareEnv(dataDir));
    expect(result.code).toBe(0);
    expect(result.stderr).toContain(`using the demo's key in ${file}`);
  }, 60_000);
});
