import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runPolicyTestCommand } from "../../src/policy/test-command.js";

/** `traitgate policy test`: a case table against a policy file, with per-rule coverage. */

const dir = mkdtempSync(join(tmpdir(), "traitgate-policy-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const shippedCases = join(import.meta.dirname, "cases/default-policy.json");

async function run(args: string[]) {
  let out = "";
  let err = "";
  const code = await runPolicyTestCommand(args, {
    out: { write: (t: string) => (out += t) },
    err: { write: (t: string) => (err += t) },
  });
  return { code, out, err };
}

const file = (name: string, value: unknown) => {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(value));
  return path;
};

describe("traitgate policy test", () => {
  it("passes the shipped table against the shipped policy, every rule reached", async () => {
    const { code, out } = await run([shippedCases]);
    expect(code).toBe(0);
    expect(out).toMatch(/^80\/80 cases pass/);
    expect(out).not.toContain("rules no case reaches");
  });

  it("names the failing cases and the unreached rules of a policy file", async () => {
    const policy = file("policy.json", {
      rules: [
        {
          id: "viewers",
          description: "viewers search",
          contexts: ["SEARCH"],
          when: { all: ["role:viewer"] },
          decision: "allow",
        },
        {
          id: "exports",
          description: "exports",
          contexts: ["DATA_EXPORT"],
          when: { all: ["capability:export"] },
          decision: "allow",
        },
      ],
    });
    const cases = file("cases.json", [
      {
        name: "ok",
        request: { traits: ["role:admin"], context: "SEARCH" },
        want: { decision: "allow" },
      },
      {
        name: "wrong",
        request: { traits: ["role:viewer"], context: "SEARCH" },
        want: { decision: "deny" },
      },
      {
        name: "bad trait",
        request: { traits: ["team:red"], context: "SEARCH" },
        want: { error: "TRAIT_MALFORMED" },
      },
    ]);
    const { code, out } = await run([cases, "--policy", policy]);
    expect(code).toBe(1);
    expect(out).toContain('FAIL case 2 "wrong": decision: want deny, got allow');
    expect(out).toContain('FAIL case 3 "bad trait": refused: TRAIT_UNKNOWN_CATEGORY');
    expect(out).toContain("1/3 cases pass");
    expect(out).toContain("rules no case reaches: exports");
  });

  it("refuses a policy that does not validate, naming the issue", async () => {
    const policy = file("bad.json", {
      rules: [
        {
          id: "x",
          description: "x",
          contexts: ["SEARCH"],
          when: { all: ["role:ghost"] },
          decision: "allow",
        },
      ],
    });
    const { code, err } = await run([file("empty.json", []), "--policy", policy]);
    expect(code).toBe(1);
    expect(err).toContain("TRAIT_UNREGISTERED rules[0].when.all[0]");
  });

  it("is a usage error without a cases file", async () => {
    expect((await run([])).code).toBe(2);
  });

  it("answers bad input files with exit 2 and what is wrong, never a stack trace", async () => {
    const broken = join(dir, "broken.json");
    writeFileSync(broken, "{not json");
    const cycle = file("cycle.json", [
      { name: "role:a", description: "", implies: ["role:b"] },
      { name: "role:b", description: "", implies: ["role:a"] },
    ]);
    for (const args of [
      [join(dir, "missing.json")],
      [broken],
      [file("no-want.json", [{ request: {} }])],
      [shippedCases, "--traits", cycle],
    ]) {
      const result = await run(args);
      expect(result.code).toBe(2);
      expect(result.err).not.toMatch(/\n\s+at /);
    }
  });
});
