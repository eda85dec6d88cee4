import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cliNodeOptions, cliScript, killAll, startCli, stopCli } from "../support/cli.js";
import {
  type DemoValues,
  expectErrors,
  placeholders,
  type ShellBlock,
  shellBlocks,
  shownFields,
  substitute,
  wrap,
} from "../support/doc-examples.js";

/**
 * The docs' shell examples run as written (convention: test/support/doc-examples.ts and
 * README's "Testing"). Every ```sh/```bash/```shell block of README.md and docs/*.md is either
 * marked `<!-- not run: reason -->` or run, in order per document, with `bash -euo pipefail`
 * against one `traitgate demo` started here, and must exit 0: an API change that breaks an
 * example (a path, a field, a status) fails here.
 */

const root = fileURLToPath(new URL("../..", import.meta.url));
const documents = [
  "README.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => `docs/${f}`),
];
const parsed = documents.map((doc) => ({
  doc,
  ...shellBlocks(doc, readFileSync(join(root, doc), "utf8")),
}));
const where = (b: ShellBlock) => `${b.doc}:${b.line}`;

describe("every shell example is marked or runnable", () => {
  it("finds the blocks (the parser sees what a reader sees)", () => {
    const all = parsed.flatMap((p) => p.blocks);
    // README's quickstart and docs/operator-lane.md's indented list items are blocks too.
    expect(all.some((b) => b.doc === "README.md" && b.code.includes("/auth/login"))).toBe(true);
    expect(all.filter((b) => b.doc === "docs/operator-lane.md").length).toBeGreaterThanOrEqual(3);
  });

  it("a marker gives its reason and stands right before a shell block", () => {
    const problems = parsed.flatMap((p) => [
      ...p.strayMarkers.map((line) => `${p.doc}:${line}: a not-run marker before no shell block`),
      ...p.blocks
        .filter((b) => b.notRun !== undefined && b.notRun === "")
        .map((b) => `${where(b)}: a not-run marker without a reason`),
    ]);
    expect(problems).toEqual([]);
  });

  it("an unmarked block leaves nothing for the reader to fill in", () => {
    const demo: DemoValues = { address: "127.0.0.1:1", password: "pw", apiKey: "tgk_x" };
    const problems = parsed.flatMap((p) =>
      p.blocks
        .filter((b) => b.notRun === undefined)
        .flatMap((b) => {
          const left = placeholders(substitute(b.code, demo));
          return left.length === 0
            ? []
            : [`${where(b)}: mark it <!-- not run: … --> or fill in ${left.join(", ")}`];
        }),
    );
    expect(problems).toEqual([]);
  });
});

const missingTools = ["bash", "curl", "jq"].filter(
  (tool) => spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0,
);
const skip = missingTools.length > 0 && !process.env.CI;
if (skip) {
  console.warn(
    `docs examples not run: ${missingTools.join(", ")} missing (apt-get install -y curl jq)`,
  );
}

describe.skipIf(skip)("the runnable examples, against a demo", () => {
  let demo: DemoValues;
  let token = "";
  let child: Awaited<ReturnType<typeof startCli>>["child"] | undefined;
  const dir = mkdtempSync(join(tmpdir(), "traitgate-docs-"));

  beforeAll(async () => {
    // `traitgate` as the docs call it: the compiled CLI of this checkout.
    const bin = join(dir, "bin");
    mkdirSync(bin, { recursive: true });
    writeFileSync(
      join(bin, "traitgate"),
      `#!/bin/sh\nexec "${process.execPath}" ${cliNodeOptions.join(" ")} "${cliScript}" "$@"\n`,
    );
    chmodSync(join(bin, "traitgate"), 0o755);
    const started = await startCli(
      ["demo"],
      { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: join(dir, "data"), PORT: "0" },
      /Search as each/,
    );
    child = started.child;
    const output = started.output();
    const url = /running at (http:\/\/\S+)/.exec(output)?.[1] ?? "";
    demo = {
      address: new URL(url).host,
      password: /password: (\S+)/.exec(output)?.[1] ?? "",
      apiKey: /api key: (\S+)/.exec(output)?.[1] ?? "",
    };
    const login = await fetch(`${url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: "admin", password: demo.password }),
    });
    token = ((await login.json()) as { token: string }).token;
    expect(token).not.toBe("");
  });

  afterAll(async () => {
    if (child) await stopCli(child);
    killAll();
    rmSync(dir, { recursive: true, force: true });
  });

  function runBlock(block: ShellBlock, state: string) {
    const { script, expected } = expectErrors(substitute(block.code, demo));
    const file = join(dir, "block.sh");
    writeFileSync(file, wrap(script));
    return new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const bash = spawn("bash", ["-euo", "pipefail", file], {
        cwd: root,
        env: {
          PATH: `${join(dir, "bin")}:${process.env.PATH}`,
          HOME: process.env.HOME,
          TG_STATE: state,
        },
      });
      let out = "";
      let err = "";
      bash.stdout.on("data", (c: Buffer) => {
        out += c;
      });
      bash.stderr.on("data", (c: Buffer) => {
        err += c;
      });
      bash.on("close", (code) => resolve({ code, out, err }));
    }).then((result) => ({ ...result, expected }));
  }

  const runnable = parsed.filter((p) => p.blocks.some((b) => b.notRun === undefined));
  it.each(runnable.map((p) => [p.doc, p.blocks] as const))("%s", async (doc, blocks) => {
    // The document's variables: the admin's token and the demo's key to start with.
    const state = join(dir, `${doc.replace(/\W/g, "_")}.state`);
    writeFileSync(state, `TOKEN='${token}'\nKEY='${demo.apiKey}'\n`);
    for (const block of blocks.filter((b) => b.notRun === undefined)) {
      const { code, out, err, expected } = await runBlock(block, state);
      const report = `${where(block)} exited ${code}\n--- stdout\n${out}\n--- stderr\n${err}`;
      expect(code, report).toBe(0);
      for (const shown of expected) {
        expect(out, `${where(block)}: the error the docs show`).toContain(`"code":"${shown.code}"`);
        if (shown.reason) expect(out, where(block)).toContain(`"reason":"${shown.reason}"`);
      }
      const compact = out.replace(/"\s*:\s*/g, '":');
      const missing = shownFields(block.code).filter((f) => !compact.includes(`"${f}":`));
      expect(missing, `${where(block)}: fields the docs show, missing from\n${out}`).toEqual([]);
    }
  });
});
