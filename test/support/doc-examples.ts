/**
 * The shell examples of README.md and docs/*.md as data (test/docs/examples.test.ts).
 *
 * The convention (README, "Testing"): every ```sh, ```bash or ```shell block is run by the
 * test against a demo server, in order per document, unless the line right before its fence
 * is `<!-- not run: <reason> -->`. Before a block runs, `localhost:8080` and `127.0.0.1:8080`
 * become the test server's address, `<printed password>` and `<printed api key>` what its
 * demo printed, and `npm run -s traitgate --` the compiled `traitgate`. `$TOKEN` (the admin's
 * access token) and `$KEY` (the demo's API key) are set; variables a block sets are kept for
 * the document's later blocks. `curl` fails on an HTTP error status, except for a command
 * whose next line shows an error body (`# {"code":"…", …}`): that command must answer that
 * code (and reason, when shown). The field names of an answer a block shows
 * (`# {"valid":true,…}`) must be in its output.
 */

export interface ShellBlock {
  /** Where it is: the document (relative to the repository) and the fence's line (1-based). */
  doc: string;
  line: number;
  code: string;
  /** The reason of a `<!-- not run: … -->` marker; undefined when the block is run. */
  notRun: string | undefined;
}

const markerPattern = /^<!--\s*not run:(.*?)-->\s*$/;
const fencePattern = /^(\s*)(`{3,})\s*([\w+-]*)/;
const shellLanguages = new Set(["sh", "bash", "shell"]);

/** Every shell block of a Markdown text, and every marker that precedes no shell block. */
export function shellBlocks(
  doc: string,
  text: string,
): { blocks: ShellBlock[]; strayMarkers: number[] } {
  const lines = text.split("\n");
  const blocks: ShellBlock[] = [];
  const strayMarkers: number[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const fence = fencePattern.exec(line);
    if (fence === null) continue;
    const [, indent = "", ticks = "```", language = ""] = fence;
    const body: string[] = [];
    let end = i + 1;
    for (; end < lines.length; end++) {
      const inner = lines[end] ?? "";
      if (inner.trim().startsWith(ticks) && inner.trim().replace(/`/g, "") === "") break;
      body.push(inner.startsWith(indent) ? inner.slice(indent.length) : inner.trimStart());
    }
    const previous = (lines[i - 1] ?? "").trim();
    const marker = markerPattern.exec(previous);
    if (shellLanguages.has(language)) {
      blocks.push({ doc, line: i + 1, code: body.join("\n"), notRun: marker?.[1]?.trim() });
    } else if (marker !== null) {
      strayMarkers.push(i);
    }
    i = end;
  }
  // A marker not right before a fence at all.
  lines.forEach((line, i) => {
    if (markerPattern.test(line.trim()) && !fencePattern.test(lines[i + 1] ?? "")) {
      strayMarkers.push(i + 1);
    }
  });
  return { blocks, strayMarkers };
}

export interface DemoValues {
  /** host:port of the test server. */
  address: string;
  password: string;
  apiKey: string;
}

/** The block as the test runs it: the substitutions of the convention applied. */
export function substitute(code: string, demo: DemoValues): string {
  return code
    .replace(/\b(localhost|127\.0\.0\.1):8080\b/g, demo.address)
    .replaceAll("<printed password>", demo.password)
    .replaceAll("<printed api key>", demo.apiKey)
    .replace(/npm run -s traitgate --/g, "traitgate");
}

/** What in a block, once substituted, is still a placeholder a reader must fill in. */
export function placeholders(code: string): string[] {
  const commands = code
    .split("\n")
    .filter((l) => !l.trim().startsWith("#"))
    .map((l) => l.replace(/\s#\s.*$/, ""))
    .join("\n");
  return [...commands.matchAll(/<[a-z][^<>\n]*>|…/g)].map((m) => m[0]);
}

export interface ExpectedError {
  /** The Connect code the error body must carry (`unauthenticated`). */
  code: string;
  reason: string | undefined;
}

/**
 * Marks each command whose next line shows an error body (`# {"code":"…"`) with
 * `TG_EXPECT_ERROR=1` (curl then does not fail on its status) and returns what the output
 * must contain for it.
 */
export function expectErrors(code: string): { script: string; expected: ExpectedError[] } {
  const lines = code.split("\n");
  const expected: ExpectedError[] = [];
  for (let i = 0; i < lines.length; i++) {
    const shown = /^\s*#\s*\{\s*"code"\s*:\s*"([a-z_]+)"/.exec(lines[i] ?? "");
    if (shown === null) continue;
    // The start of the command this comment follows (continuation lines end with \).
    let start = i - 1;
    while (start > 0 && (lines[start - 1] ?? "").trimEnd().endsWith("\\")) start--;
    if (start < 0 || (lines[start] ?? "").trim().startsWith("#")) continue;
    lines[start] = `TG_EXPECT_ERROR=1 ${lines[start]}`;
    const reason = /"reason"\s*:\s*"([A-Z_]+)"/.exec(lines[i] ?? "")?.[1];
    expected.push({ code: shown[1] ?? "", reason });
  }
  return { script: lines.join("\n"), expected };
}

/**
 * The field names of the answers a block shows (`# {"valid":true,"username":"admin",…}`,
 * continued on `#  ` lines), which its output must contain: a renamed or dropped field fails.
 * Error bodies are checked by `expectErrors`.
 */
export function shownFields(code: string): string[] {
  const fields = new Set<string>();
  let inAnswer = false;
  for (const line of code.split("\n")) {
    const trimmed = line.trim();
    if (/^#\s*\{/.test(trimmed)) inAnswer = !/^#\s*\{\s*"code"/.test(trimmed);
    else if (!/^#\s{2,}\S/.test(trimmed)) inAnswer = false;
    if (!inAnswer) continue;
    for (const m of trimmed.matchAll(/"([a-z_][a-z0-9_]*)"\s*:/g)) fields.add(m[1] ?? "");
  }
  return [...fields];
}

/**
 * The script one block runs as (`bash -euo pipefail`): the document's variables so far from
 * the state file, the block, then every variable it set or kept written back.
 */
export function wrap(script: string): string {
  return [
    'tg_before=" $(compgen -v | tr "\\n" " ") "',
    // curl fails on an HTTP error status, unless the docs show the error it answers.
    "TG_EXPECT_ERROR=",
    'curl() { if [ -n "$TG_EXPECT_ERROR" ]; then command curl "$@"; else command curl --show-error --fail-with-body "$@"; fi; }',
    'source "$TG_STATE"',
    script,
    "echo",
    ': > "$TG_STATE"',
    "for tg_v in $(compgen -v); do",
    '  case "$tg_before" in *" $tg_v "*) continue ;; esac',
    '  case "$tg_v" in tg_*|TG_*) continue ;; esac',
    '  declare -p "$tg_v" >> "$TG_STATE"',
    "done",
    "",
  ].join("\n");
}
