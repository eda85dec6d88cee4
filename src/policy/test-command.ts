import { readFile } from "node:fs/promises";
import { DomainError } from "../errors.js";
import { defaultPolicy } from "./default-policy.js";
import { compilePolicy } from "./engine.js";
import { createTraitRegistry, type TraitDefinition } from "./registry.js";
import type { EvaluationRequest, PolicyDocument } from "./types.js";
import { validatePolicy } from "./validate.js";

/**
 * `traitgate policy test CASES.json [--policy POLICY.json] [--traits TRAITS.json]`: runs a
 * table of request → expected decision against a policy file (the shipped policy by
 * default), for the CI of policy authors. The table is the format of
 * test/policy/cases/default-policy.json: `[{name, request, want: {decision?, deciding_rule?,
 * reason_code?, error?}}]`. Prints each failing case, then per-rule coverage (how many cases
 * each rule matched in, and the rules no case reaches). Exit 0 when the policy validates and
 * every case passes, 1 otherwise, 2 on a usage error.
 */

interface PolicyCase {
  name: string;
  request: EvaluationRequest;
  want: { decision?: string; deciding_rule?: string; reason_code?: string; error?: string };
}

export interface PolicyTestIo {
  out: { write(text: string): unknown };
  err: { write(text: string): unknown };
}

export async function runPolicyTestCommand(
  args: readonly string[],
  io: PolicyTestIo,
): Promise<number> {
  const files: { cases?: string; policy?: string; traits?: string } = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--policy" || arg === "--traits") {
      const value = args[++i];
      if (value === undefined) return usage(io, `${arg} needs a file`);
      files[arg === "--policy" ? "policy" : "traits"] = value;
    } else if (arg.startsWith("--")) return usage(io, `unknown option ${arg}`);
    else if (files.cases === undefined) files.cases = arg;
    else return usage(io, `unexpected argument ${arg}`);
  }
  if (files.cases === undefined) return usage(io, "name the cases file");
  // Unreadable files, bad JSON and a bad trait registry are the user's input: exit 2 with
  // what is wrong, never a stack trace.
  const readJson = async (path: string): Promise<unknown> => {
    try {
      return JSON.parse(await readFile(path, "utf8")) as unknown;
    } catch (err) {
      throw new InputError(`${path}: ${(err as Error).message}`);
    }
  };
  let cases: PolicyCase[];
  let document: unknown;
  let registry: ReturnType<typeof createTraitRegistry>;
  try {
    cases = (await readJson(files.cases)) as PolicyCase[];
    if (!Array.isArray(cases)) return usage(io, `${files.cases} is not a JSON array of cases`);
    const bad = cases.findIndex(
      (c) =>
        c === null ||
        typeof c !== "object" ||
        typeof c.request !== "object" ||
        typeof c.want !== "object",
    );
    if (bad >= 0)
      return usage(io, `${files.cases}: case ${bad + 1} needs "request" and "want" objects`);
    document = files.policy ? await readJson(files.policy) : defaultPolicy;
    const traits = files.traits ? ((await readJson(files.traits)) as TraitDefinition[]) : [];
    registry = createTraitRegistry(traits);
  } catch (err) {
    if (err instanceof InputError || err instanceof DomainError) return usage(io, err.message);
    throw err;
  }
  const issues = validatePolicy(document, registry);
  if (issues.length > 0) {
    for (const issue of issues)
      io.err.write(`policy: ${issue.reason} ${issue.field}: ${issue.message}\n`);
    return 1;
  }
  const engine = compilePolicy(document as PolicyDocument, registry);
  const matched = new Map<string, number>(engine.document.rules.map((r) => [r.id, 0]));
  let failed = 0;
  cases.forEach((c, i) => {
    const label = `case ${i + 1} "${c.name ?? ""}"`;
    const problems: string[] = [];
    try {
      const got = engine.evaluate(c.request);
      for (const id of got.matchedRules) matched.set(id, (matched.get(id) ?? 0) + 1);
      if (c.want.error !== undefined)
        problems.push(`want error ${c.want.error}, got ${got.decision}`);
      const check = (what: string, want: string | undefined, have: string | undefined) => {
        if (want !== undefined && want !== have)
          problems.push(`${what}: want ${want}, got ${have ?? "none"}`);
      };
      check("decision", c.want.decision, got.decision);
      check("deciding_rule", c.want.deciding_rule, got.decidingRule);
      check("reason_code", c.want.reason_code, got.reasonCode);
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
      if (c.want.error !== err.reason) problems.push(`refused: ${err.reason} (${err.message})`);
    }
    if (problems.length > 0) {
      failed++;
      io.out.write(`FAIL ${label}: ${problems.join("; ")}\n`);
    }
  });
  const unreached = [...matched].filter(([, n]) => n === 0).map(([id]) => id);
  io.out.write(
    `${cases.length - failed}/${cases.length} cases pass; policy ${engine.version.slice(0, 12)}; ` +
      `rules reached: ${matched.size - unreached.length}/${matched.size}\n`,
  );
  for (const [id, n] of matched) io.out.write(`  ${n > 0 ? "✓" : "✗"} ${id}: ${n} case(s)\n`);
  if (unreached.length > 0) io.out.write(`rules no case reaches: ${unreached.join(", ")}\n`);
  return failed === 0 ? 0 : 1;
}

function usage(io: PolicyTestIo, message: string): number {
  io.err.write(
    `policy test: ${message}\nusage: traitgate policy test CASES.json [--policy POLICY.json] [--traits TRAITS.json]\n`,
  );
  return 2;
}

/** A problem with the files the user named. */
class InputError extends Error {}
