import { create, type DescMessage, toJson } from "@bufbuild/protobuf";
import { createValidator } from "@bufbuild/protovalidate";
import { FieldRulesSchema } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { RE2JS } from "@bufbuild/re2";
import { describe, expect, it, vi } from "vitest";
import { EvaluateRequestSchema } from "../../gen/traitgate/policy/v1/policy_pb.js";
import { rulesOf } from "../../src/openapi/constraints.js";
import {
  createPatternMatcher,
  createRe2Matcher,
  createSchemaValidator,
  nativePattern,
} from "../../src/server/pattern-match.js";
import { serviceSchemaFiles } from "../support/schema-files.js";

const files = serviceSchemaFiles;

/** Every `pattern` in the rules of every field of the services' messages (items and map keys too). */
function schemaPatterns(): Set<string> {
  const out = new Set<string>();
  const visit = (message: DescMessage) => {
    for (const field of message.fields) {
      const rules = rulesOf(field);
      if (rules === undefined) continue;
      JSON.stringify(toJson(FieldRulesSchema, rules), (key, value: unknown) => {
        if (key === "pattern" && typeof value === "string") out.add(value);
        return value;
      });
    }
    for (const nested of message.nestedMessages) visit(nested);
  };
  for (const file of files) for (const message of file.messages) visit(message);
  return out;
}

/** Strings to try a pattern on: near misses of every kind a string check misses. */
function corpus(seed: number): string[] {
  let state = seed;
  const next = () => {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    return state;
  };
  const alphabet = [
    ..."abcxyzABCXYZ0189_-.:@ ",
    "\n",
    "\r",
    "\t",
    "\u0000",
    "\u001f",
    "\u007f",
    "\u0080",
    "é",
    "ß",
    "İ",
    "\u212a", // Kelvin sign: a case-folding trap
    "\u2028",
    "😀",
    "\ud800", // a lone surrogate (JSON can carry one)
    "ａ", // fullwidth a
  ];
  const out = ["", "a", "A", "0", "ai-core", "CLINICAL_NOTE", "data_access:phi", "123456"];
  for (let n = 0; n < 4000; n++) {
    const length = next() % 80;
    let s = "";
    for (let i = 0; i < length; i++) s += alphabet[next() % alphabet.length];
    out.push(s);
  }
  return out;
}

/** Strings the pattern's own shape would accept, then each with one character changed or added. */
function nearMatches(): string[] {
  const samples = ["a", "ab", "a-b", "a_b", "a.b", "ab:cd", "A", "AB_C", "0123456789", "a@b.c"];
  const out: string[] = [];
  for (const s of samples) {
    for (const length of [1, 2, 6, 32, 62, 63, 64, 65, 127, 128, 129]) {
      const base = s.repeat(Math.ceil(length / s.length)).slice(0, length);
      out.push(base, `${base}\n`, `\n${base}`, `${base}\u0000`, `${base}é`, base.toUpperCase());
      out.push(base.replace(/a/g, "\u212a"), `${base}😀`, `${base}:x`);
    }
  }
  // The digits-only and hex patterns.
  out.push("000000", "00000", "0000000", "a".repeat(64), "f".repeat(64), "F".repeat(64));
  return out;
}

describe("schema patterns: the platform RegExp where it agrees with RE2", () => {
  const patterns = schemaPatterns();

  it("finds the schema's patterns", () => {
    // The walk works (a dozen distinct patterns today), so the tests below test something.
    expect(patterns.size).toBeGreaterThanOrEqual(10);
    expect(patterns).toContain("^[A-Z][A-Z0-9_]{0,63}$");
    expect(patterns).toContain("^[^\\x00-\\x1f\\x7f]+$");
  });

  it("matches every schema pattern with the platform RegExp", () => {
    // A pattern outside the grammar still works (through RE2), but at 20–40× the cost per
    // match: widen the grammar, with the same proof, or keep the pattern inside it.
    for (const pattern of patterns) expect(nativePattern(pattern), pattern).not.toBeNull();
  });

  it("gives RE2's answer for every schema pattern on every string tried", () => {
    const re2 = createRe2Matcher();
    const strings = corpus(17);
    const near = nearMatches();
    for (const pattern of patterns) {
      const native = nativePattern(pattern) as RegExp;
      for (const s of [...strings, ...near]) {
        const want = re2(pattern, s);
        if (native.test(s) !== want) {
          throw new Error(`${pattern} on ${JSON.stringify(s)}: RE2 says ${want}`);
        }
      }
    }
  });
});

describe("nativePattern", () => {
  it.each([
    ["^(a|b)+$", "a group and alternation"],
    ["^a.b$", "a dot"],
    ["^\\s+$", "a class escape that differs between the engines"],
    ["^\\d+$", "a class escape"],
    ["^[a-z]+[a-z0-9]+$", "two variable elements whose sets overlap (quadratic backtracking)"],
    ["^[a-z]*[0-9]?x$", "a variable element followed by an optional one"],
    ["^[a-z]+?$", "a lazy quantifier"],
    ["^a{2000}$", "a repeat beyond RE2's 1,000"],
    ["a+$", "no start anchor"],
    ["^a+", "no end anchor"],
    ["^a+\\$", "an escaped dollar at the end"],
    ["^[z-a]$", "a reversed range"],
    ["^[]$", "an empty class"],
    ["^\\_$", "an escape outside the grammar"],
    ["^a\\-b$", "an escape the grammar takes but RegExp's u flag refuses outside a class"],
    [
      "^a{1000}b{1000}c{1000}d{1000}e{1000}f{1000}g{1000}h{1000}i{1000}j{1000}k$",
      "repeats past the size cap",
    ],
    ["(?i)^a$", "flags"],
  ])("leaves %s to RE2 (%s)", (pattern) => {
    expect(nativePattern(pattern)).toBeNull();
  });

  it.each([
    "^[a-z_]+:[a-z0-9_.-]+$",
    "^[-a-z]{1,3}$",
    "^[a-z-]{2,}$",
    "^x*$",
    "^[^\\x00-\\x1f\\x7f]+$",
    "^[a-z]+\\.[a-z]+$",
    "^$",
  ])("takes %s", (pattern) => {
    expect(nativePattern(pattern)).not.toBeNull();
  });

  it("agrees with RE2 on the grammar's edge cases", () => {
    const re2 = createRe2Matcher();
    for (const pattern of ["^[-a-z]{1,3}$", "^[a-z-]{2,}$", "^x*$", "^$", "^[a-z]+\\.[a-z]+$"]) {
      const native = nativePattern(pattern) as RegExp;
      for (const s of corpus(5).slice(0, 1500))
        expect(native.test(s), pattern).toBe(re2(pattern, s));
    }
  });
});

describe("createPatternMatcher", () => {
  it("sends what the grammar leaves out to the fallback, and the rest to RegExp", () => {
    const seen: string[] = [];
    const match = createPatternMatcher((pattern, against) => {
      seen.push(pattern);
      return createRe2Matcher()(pattern, against);
    });
    expect(match("^[a-z]+$", "abc")).toBe(true);
    expect(match("^[a-z]+$", "ab1")).toBe(false);
    expect(seen).toEqual([]);
    expect(match("^(ab)+$", "abab")).toBe(true);
    expect(seen).toEqual(["^(ab)+$"]);
  });

  it("still refuses a pattern RE2 refuses", () => {
    expect(() => createPatternMatcher()("^(?<=a)b$", "b")).toThrow();
  });
});

describe("createSchemaValidator", () => {
  it("checks the schema's patterns as before", () => {
    const validator = createSchemaValidator();
    const ok = create(EvaluateRequestSchema, { context: "CLINICAL_NOTE" });
    expect(validator.validate(EvaluateRequestSchema, ok).kind).toBe("valid");
    for (const context of ["clinical", "CLINICAL\n", "A".repeat(65), "ÄRZTE", "\u212a"]) {
      const bad = create(EvaluateRequestSchema, { context });
      const result = validator.validate(EvaluateRequestSchema, bad);
      expect(result.kind, JSON.stringify(context)).toBe("invalid");
    }
  });

  it("compiles no RE2 expression for the schema's patterns (protovalidate's default does)", () => {
    const compile = vi.spyOn(RE2JS, "compile");
    try {
      const message = create(EvaluateRequestSchema, { context: "USER_ACTION" });
      expect(createSchemaValidator().validate(EvaluateRequestSchema, message).kind).toBe("valid");
      expect(compile).not.toHaveBeenCalled();
      expect(createValidator().validate(EvaluateRequestSchema, message).kind).toBe("valid");
      expect(compile).toHaveBeenCalledWith("^[A-Z][A-Z0-9_]{0,63}$");
    } finally {
      compile.mockRestore();
    }
  });
});

describe("the RE2 engine used", () => {
  it("is the one protovalidate depends on (one copy: the fallback and its default agree)", async () => {
    const { readFile } = await import("node:fs/promises");
    const read = async (path: string) =>
      JSON.parse(await readFile(new URL(path, import.meta.url), "utf8")) as {
        version?: string;
        dependencies?: Record<string, string>;
      };
    const ours = await read("../../package.json");
    const protovalidate = await read("../../node_modules/@bufbuild/protovalidate/package.json");
    const installed = await read("../../node_modules/@bufbuild/re2/package.json");
    expect(ours.dependencies?.["@bufbuild/re2"]).toBe(
      protovalidate.dependencies?.["@bufbuild/re2"],
    );
    expect(installed.version).toBe(ours.dependencies?.["@bufbuild/re2"]);
  });
});
