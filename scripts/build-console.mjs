// Bundles the admin console (web/) into dist/console: app.js (esbuild, minified), app.css and
// index.html. `npm run build` runs it; the test suite's global setup runs it too.
import { copyFile, mkdir, readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "console");

export async function buildConsole({ quiet = false } = {}) {
  await mkdir(out, { recursive: true });
  await build({
    absWorkingDir: root,
    entryPoints: ["web/src/main.tsx"],
    outfile: join(out, "app.js"),
    bundle: true,
    format: "esm",
    platform: "browser",
    target: ["es2022"],
    minify: true,
    jsx: "automatic",
    jsxImportSource: "preact",
    legalComments: "none",
    logLevel: "warning",
  });
  await copyFile(join(root, "web", "index.html"), join(out, "index.html"));
  await copyFile(join(root, "web", "app.css"), join(out, "app.css"));
  await copyFile(join(root, "web", "favicon.svg"), join(out, "favicon.svg"));
  const js = await readFile(join(out, "app.js"));
  const css = await readFile(join(out, "app.css"));
  const gzipped = gzipSync(js).length + gzipSync(css).length;
  if (!quiet) {
    console.log(`console built in dist/console: ${(gzipped / 1024).toFixed(1)} KB gzipped`);
  }
  return { gzippedBytes: gzipped };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await buildConsole({ quiet: process.argv.includes("--quiet") });
}
