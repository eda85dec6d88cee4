import { benchAudit } from "./audit.js";
import { benchConsole } from "./console.js";
import { benchGateway } from "./gateway.js";
import { benchIdentity } from "./identity.js";
import { benchPolicy } from "./policy.js";
import { benchPolicyService } from "./policy-service.js";
import { benchRag } from "./rag.js";

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
console.log();
console.log(await benchPolicyService(seconds));
console.log();
console.log(await benchGateway(seconds));
console.log();
console.log(await benchRag());
console.log();
console.log(await benchConsole());
