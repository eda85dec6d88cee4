/**
 * A reader of the Dockerfile syntax the repository's Dockerfiles use (test/e2e/containers.test.ts):
 * comments, `\` continuations, stages (`FROM image AS name`), and per instruction its
 * arguments. Exec-form (JSON) CMD and HEALTHCHECK are parsed into argv; shell-form RUN stays a
 * string, split on `&&` by the test.
 */

export interface Instruction {
  keyword: string;
  args: string;
}

export interface Stage {
  image: string;
  name: string | undefined;
  instructions: Instruction[];
}

export function parseDockerfile(text: string): Stage[] {
  const logical: string[] = [];
  let pending = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    // Docker drops comment lines, inside a continuation too.
    if (line.startsWith("#")) continue;
    if (line === "" && pending === "") continue;
    if (line.endsWith("\\")) {
      pending += `${line.slice(0, -1).trim()} `;
      continue;
    }
    logical.push(`${pending}${line}`.trim());
    pending = "";
  }
  if (pending !== "") logical.push(pending.trim());

  const stages: Stage[] = [];
  for (const line of logical.filter((l) => l !== "")) {
    const match = /^(\S+)\s*(.*)$/.exec(line);
    const keyword = (match?.[1] ?? "").toUpperCase();
    const args = match?.[2] ?? "";
    if (keyword === "FROM") {
      const [image = "", as, name] = args.split(/\s+/);
      stages.push({
        image,
        name: as?.toUpperCase() === "AS" ? name : undefined,
        instructions: [],
      });
      continue;
    }
    const stage = stages.at(-1);
    if (stage === undefined) throw new Error(`${keyword} before the first FROM`);
    stage.instructions.push({ keyword, args });
  }
  return stages;
}

/** The instructions of a stage with that keyword. */
export const all = (stage: Stage, keyword: string): Instruction[] =>
  stage.instructions.filter((i) => i.keyword === keyword);

/** An exec-form command (`["node", "x.js"]`); a shell form is refused (no shell in the argv). */
export function execForm(args: string): string[] {
  const parsed: unknown = JSON.parse(args);
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === "string")) {
    throw new Error(`not an exec-form command: ${args}`);
  }
  return parsed as string[];
}

/** `ENV A=1 B=2` (the key=value form) as a record. */
export function envOf(stage: Stage): Record<string, string> {
  const env: Record<string, string> = {};
  for (const { args } of all(stage, "ENV")) {
    for (const pair of args.split(/\s+/).filter((p) => p !== "")) {
      const eq = pair.indexOf("=");
      if (eq <= 0) throw new Error(`ENV needs KEY=VALUE pairs (got "${pair}")`);
      env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
  }
  return env;
}

/** `HEALTHCHECK [--option=value ...] CMD [...]`: its options and argv. */
export function healthcheckOf(stage: Stage): { options: Record<string, string>; argv: string[] } {
  const [only, ...more] = all(stage, "HEALTHCHECK");
  if (only === undefined || more.length > 0) throw new Error("one HEALTHCHECK per stage");
  const match = /^((?:--[a-z-]+=\S+\s+)*)CMD\s+(.*)$/.exec(only.args);
  if (match === null) throw new Error(`HEALTHCHECK without CMD: ${only.args}`);
  const options: Record<string, string> = {};
  for (const option of (match[1] ?? "")
    .trim()
    .split(/\s+/)
    .filter((o) => o !== "")) {
    const [key = "", value = ""] = option.slice(2).split("=");
    options[key] = value;
  }
  return { options, argv: execForm(match[2] ?? "") };
}
