import { cpSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { buildTemplates } from "./pglite-templates.js";

/**
 * Vitest global setup: compiles src/ and gen/ to JavaScript once (esbuild, file by file, the
 * tree kept as it is) into dist/test-build, so the suites that start `traitgate` as its own
 * process run plain JavaScript: loading the sources through tsx cost every such process
 * about two seconds of CPU, and the suites start some fifty of them. The output sits inside
 * the package, so the code finds package.json, its migrations and the console's bundle by
 * walking up from itself as it does from src/ and dist/src/. And makes the PGlite dumps the
 * test databases start from (test/support/pglite-templates.ts).
 */
export const testBuildDir = fileURLToPath(new URL("../../dist/test-build", import.meta.url));

/**
 * Once per run: Vitest runs the global setup of each project (vitest.config.ts), in one
 * process, one after the other, before any test starts.
 */
export default function setup(): Promise<void> {
  const runs = globalThis as Record<symbol, Promise<void> | undefined>;
  const key = Symbol.for("traitgate.test-build");
  runs[key] ??= makeTestBuild();
  return runs[key];
}

async function makeTestBuild(): Promise<void> {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  const sources = ["src", "gen"].flatMap((top) =>
    readdirSync(join(root, top), { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
      .map((f) => join(top, f)),
  );
  rmSync(testBuildDir, { recursive: true, force: true });
  await build({
    absWorkingDir: root,
    entryPoints: sources,
    outdir: testBuildDir,
    outbase: ".",
    bundle: false,
    format: "esm",
    platform: "node",
    // 20.10: the first Node 20 that takes import attributes (`with { type: "json" }`), kept as written.
    target: "node20.10",
    sourcemap: "inline",
    logLevel: "warning",
  });
  // JSON the code imports (gen/openapi.json) is not compiled: it is copied beside the output.
  for (const top of ["src", "gen"]) {
    for (const f of readdirSync(join(root, top), { recursive: true, encoding: "utf8" })) {
      if (f.endsWith(".json")) cpSync(join(root, top, f), join(testBuildDir, top, f));
    }
  }
  await buildTemplates();
}
