import { benchAudit } from "./audit.js";
import { benchIdentity } from "./identity.js";
import { benchPolicy } from "./policy.js";

/**
 * `npm run bench`: every benchmark, one after the other, printed as Markdown.
 * BENCH_SECONDS sets the measured time per scenario (default 3).
 */
const seconds = Number(process.env.BENCH_SECONDS ?? "3");
console.log(`# Traitgate benchmarks (${new Date().toISOString()}, ${seconds} s per scenario)\n`);
console.log(await benchIdentity(seconds));
console.log();
console.log(await benchAudit(seconds));
console.log();
console.log(await benchPolicy(seconds));
