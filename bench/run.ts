import { cpus, loadavg } from "node:os";
import { benchAudit } from "./audit.js";
import { benchConsole } from "./console.js";
import { benchGateway } from "./gateway.js";
import { benchIdentity } from "./identity.js";
import { interrupted } from "./interrupt.js";
import { benchPolicy } from "./policy.js";
import { benchPolicyService } from "./policy-service.js";
import { benchRag } from "./rag.js";

/**
 * `npm run bench`: every benchmark, one after the other, printed as Markdown;
 * `npm run bench -- identity audit` runs only those named. BENCH_SECONDS sets
 * the measured time per scenario (default 3).
 */
const seconds = Number(process.env.BENCH_SECONDS ?? "3");
const benchmarks: Record<string, () => Promise<string>> = {
  identity: () => benchIdentity(seconds),
  audit: () => benchAudit(seconds),
  policy: () => benchPolicy(seconds),
  "policy-service": () => benchPolicyService(seconds),
  gateway: () => benchGateway(seconds),
  rag: () => benchRag(),
  console: () => benchConsole(),
};
const chosen = process.argv.slice(2);
const unknown = chosen.filter((name) => !(name in benchmarks));
if (unknown.length > 0) {
  console.error(
    `unknown benchmark ${unknown.join(", ")}; known: ${Object.keys(benchmarks).join(", ")}`,
  );
  process.exit(2);
}
console.log(`# Traitgate benchmarks (${new Date().toISOString()}, ${seconds} s per scenario)\n`);
// What the run ran on, and how busy the machine was: ratios within one run are what compare.
const cores = cpus();
const load = () =>
  loadavg()
    .map((n) => n.toFixed(2))
    .join(", ");
console.log(
  `Machine: ${cores.length} × ${cores[0]?.model.trim() ?? "?"}, Node.js ${process.version}; load average at start ${load()}\n`,
);
const failed: string[] = [];
for (const [name, run] of Object.entries(benchmarks)) {
  if (chosen.length > 0 && !chosen.includes(name)) continue;
  // Interrupted: the process exits once the undos are done; nothing new starts meanwhile.
  if (interrupted()) break;
  try {
    console.log(await run());
  } catch (err) {
    // One broken benchmark does not cost the others' figures; the run still fails at the end.
    failed.push(name);
    console.log(`## ${name}: FAILED\n\n${(err as Error).stack ?? String(err)}`);
  }
  console.log(`\n_load average after ${name}: ${load()}_\n`);
}
if (failed.length > 0) {
  console.error(`benchmarks failed: ${failed.join(", ")}`);
  process.exitCode = 1;
}
