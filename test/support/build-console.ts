import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Vitest global setup: bundles the admin console (scripts/build-console.mjs, esbuild, about a
 * second) so that `npm ci && npm test` works on a fresh clone without `npm run build`.
 */
export default function setup(): void {
  // Once per run: Vitest runs the global setup of each project (vitest.config.ts).
  const runs = globalThis as Record<symbol, boolean | undefined>;
  const key = Symbol.for("traitgate.console-build");
  if (runs[key]) return;
  runs[key] = true;
  const script = fileURLToPath(new URL("../../scripts/build-console.mjs", import.meta.url));
  execFileSync(process.execPath, [script, "--quiet"], { stdio: "inherit" });
}
