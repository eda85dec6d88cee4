import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Vitest global setup: bundles the admin console (scripts/build-console.mjs, esbuild, about a
 * second) so that `npm ci && npm test` works on a fresh clone without `npm run build`.
 */
export default function setup(): void {
  const script = fileURLToPath(new URL("../../scripts/build-console.mjs", import.meta.url));
  execFileSync(process.execPath, [script, "--quiet"], { stdio: "inherit" });
}
