#!/usr/bin/env node
// Runs the buf and Biome command-line tools from their platform packages.
//
// The npm registry this project installs from carries only the linux-x64
// builds of buf and Biome, and their wrapper packages (`@bufbuild/buf`,
// `@biomejs/biome`) list every platform's build as an optional dependency, so
// a lock file made here lacks them and `npm ci` refuses it. package.json
// therefore depends on the platform packages directly, as optional
// dependencies, and this script finds the one for this machine.
//
//   node scripts/tools.mjs buf lint
//   node scripts/tools.mjs biome check .
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const exe = process.platform === "win32" ? ".exe" : "";

function isMusl() {
  if (process.platform !== "linux") return false;
  const report = process.report?.getReport();
  return !report?.header?.glibcVersionRuntime;
}

const tools = {
  buf: () => [`@bufbuild/buf-${process.platform}-${process.arch}`, `bin/buf${exe}`],
  biome: () => [
    `@biomejs/cli-${process.platform}-${process.arch}${isMusl() ? "-musl" : ""}`,
    `biome${exe}`,
  ],
};

/** Absolute path of the tool's binary for this platform; throws with advice when missing. */
export function toolPath(name) {
  const locate = tools[name];
  if (!locate) throw new Error(`unknown tool "${name}" (known: ${Object.keys(tools).join(", ")})`);
  const [pkg, bin] = locate();
  let dir;
  try {
    dir = dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    throw new Error(
      `${name}: package ${pkg} is not installed. On this platform run: npm install --no-save ${pkg}`,
    );
  }
  const path = join(dir, bin);
  if (!existsSync(path)) throw new Error(`${name}: ${path} is missing; reinstall ${pkg}`);
  return path;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [name, ...args] = process.argv.slice(2);
  let path;
  try {
    path = toolPath(name ?? "");
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  const result = spawnSync(path, args, { stdio: "inherit" });
  if (result.error) {
    process.stderr.write(`${name}: ${result.error.message}\n`);
    process.exit(2);
  }
  process.exit(result.status ?? 1);
}
