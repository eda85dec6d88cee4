import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { commands, parseCommandLine } from "../../src/cli-usage.js";
import { ConfigError, loadCommandConfig, loadConfig } from "../../src/config.js";
import { useDemoKeys } from "../../src/demo/keys.js";

/**
 * The command line's grammar over the whole command table, in process (a spawned CLI costs
 * a second or two each; test/e2e/cli-help.test.ts spawns a few for the real exit codes).
 */

const names = commands.map((c) => c.path.join(" "));

describe("traitgate --help and -h", () => {
  it.each(names)(
    "'%s' answers --help, -h and 'help %s' with its usage, running nothing",
    (name) => {
      const path = name.split(" ");
      for (const argv of [
        [...path, "--help"],
        [...path, "-h"],
        ["help", ...path],
        // After other options, even ones the command would refuse.
        [...path, "--no-such-option", "x", "--help"],
      ]) {
        const line = parseCommandLine(argv);
        expect(line.kind, argv.join(" ")).toBe("help");
        if (line.kind === "help") expect(line.text).toContain(`Usage: traitgate ${name}`);
      }
    },
  );

  it("lists every command in the general help, which no arguments, --help, -h and help show", () => {
    for (const argv of [[], ["--help"], ["-h"], ["help"]]) {
      const line = parseCommandLine(argv);
      expect(line.kind).toBe("help");
      if (line.kind !== "help") continue;
      for (const name of names) expect(line.text).toContain(`  ${name} `);
      expect(line.text).toContain("--version");
      expect(line.text).toContain("2 usage or configuration error");
    }
  });

  it("answers a group's --help with its commands", () => {
    const line = parseCommandLine(["audit", "--help"]);
    expect(line.kind).toBe("help");
    if (line.kind === "help") {
      expect(line.text).toContain("traitgate audit verify");
      expect(line.text).toContain("traitgate audit export");
    }
  });

  it("treats --help after -- as an argument", () => {
    expect(parseCommandLine(["ingest", "--", "--help"])).toEqual({
      kind: "run",
      command: "ingest",
      args: ["--", "--help"],
    });
  });
});

describe("traitgate --version", () => {
  it.each([["--version"], ["-v"]])("%s asks for the version", (flag) => {
    expect(parseCommandLine([flag])).toEqual({ kind: "version" });
  });
});

describe("running a command", () => {
  it.each(names)("'%s' runs with its arguments", (name) => {
    const path = name.split(" ");
    const spec = commands.find((c) => c.path.join(" ") === name);
    const args = spec?.takesArgs ? ["--name", "x"] : [];
    expect(parseCommandLine([...path, ...args])).toEqual({ kind: "run", command: name, args });
  });
});

describe("usage errors name what is wrong and point at --help", () => {
  it.each([
    [["bogus"], 'unknown command "bogus"', "traitgate --help"],
    [["--bogus"], 'unknown option "--bogus"', "traitgate --help"],
    [["users"], '"users" needs a command: create', "traitgate users --help"],
    [["users", "delete"], 'unknown users command "delete"', "traitgate users --help"],
    [["audit", "check"], 'unknown audit command "check"', "traitgate audit --help"],
    [["keys"], '"keys" needs a command: rotate', "traitgate keys --help"],
    [["demo", "now"], 'demo takes no arguments (got "now")', "traitgate demo --help"],
    [["keys", "rotate", "x"], "keys rotate takes no arguments", "traitgate keys rotate --help"],
    [["help", "bogus"], 'unknown command "bogus"', "traitgate --help"],
  ])("%j", (argv, problem, help) => {
    const line = parseCommandLine(argv);
    expect(line.kind).toBe("usage-error");
    if (line.kind === "usage-error") {
      expect(line.message).toContain(problem);
      expect(line.message).toContain(`'${help}'`);
    }
  });
});

describe("a command's configuration", () => {
  const dataKey = Buffer.alloc(32, 7).toString("base64");
  const problemsOf = (fn: () => unknown) => {
    try {
      fn();
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
    return [];
  };

  it("needs no JWT_* setting: none of the one-shot commands signs a token", () => {
    const config = loadCommandConfig({}, { usesDataKeys: false });
    expect(config.jwt.secret).toBeUndefined();
    expect(config.dataKeys).toBeUndefined();
    // A bad JWT setting does not stop a command that does not use it either.
    expect(
      problemsOf(() => loadCommandConfig({ JWT_SECRET: "short" }, { usesDataKeys: false })),
    ).toEqual([]);
    // serve still requires both.
    const serving = problemsOf(() => loadConfig({}));
    expect(serving.some((p) => p.startsWith("JWT_SECRET"))).toBe(true);
    expect(serving.some((p) => p.startsWith("DATA_ENCRYPTION_KEY"))).toBe(true);
  });

  it("needs DATA_ENCRYPTION_KEY only where it seals or opens secrets", () => {
    expect(problemsOf(() => loadCommandConfig({}, { usesDataKeys: true }))).toEqual([
      expect.stringContaining("DATA_ENCRYPTION_KEY is required"),
    ]);
    const config = loadCommandConfig({ DATA_ENCRYPTION_KEY: dataKey }, { usesDataKeys: true });
    expect(config.dataKeys?.current.id).toBeTruthy();
    // Settings it shares with serve are still checked.
    expect(problemsOf(() => loadCommandConfig({ PORT: "x" }, { usesDataKeys: false }))).toEqual([
      expect.stringContaining("PORT"),
    ]);
  });

  it("finds the demo's keys in DATA_DIR, unless they are set, and creates none", () => {
    const dir = mkdtempSync(join(tmpdir(), "traitgate-demo-keys-"));
    try {
      const none: NodeJS.ProcessEnv = { DATA_DIR: dir };
      expect(useDemoKeys(none, ["DATA_ENCRYPTION_KEY", "AUDIT_CHECKPOINT_KEY"])).toEqual([]);
      expect(none.DATA_ENCRYPTION_KEY).toBeUndefined();
      writeFileSync(join(dir, "demo-encryption.key"), `${dataKey}\n`);
      const env: NodeJS.ProcessEnv = { DATA_DIR: dir };
      const notes = useDemoKeys(env, ["DATA_ENCRYPTION_KEY", "AUDIT_CHECKPOINT_KEY"]);
      expect(env.DATA_ENCRYPTION_KEY).toBe(dataKey);
      expect(env.AUDIT_CHECKPOINT_KEY).toBeUndefined();
      expect(notes).toEqual([expect.stringContaining(join(dir, "demo-encryption.key"))]);
      const set: NodeJS.ProcessEnv = { DATA_DIR: dir, DATA_ENCRYPTION_KEY: "mine" };
      expect(useDemoKeys(set, ["DATA_ENCRYPTION_KEY"])).toEqual([]);
      expect(set.DATA_ENCRYPTION_KEY).toBe("mine");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
