import type { Queryable } from "../storage/index.js";
import { verifyAuditChain } from "./verify.js";

export interface AuditVerifyCommandOptions {
  /** Print a progress line every this many events (default 10,000). */
  progressEvery?: number;
  pageSize?: number;
}

/**
 * `traitgate audit verify`: checks the whole chain on a migrated database, printing progress
 * on long chains and one final line. Returns the process exit code: 0 intact, 1 broken
 * (the line names the first broken event), 2 the check could not run.
 */
export async function runAuditVerifyCommand(
  db: Queryable,
  out: { write(text: string): unknown },
  options: AuditVerifyCommandOptions = {},
): Promise<number> {
  const every = options.progressEvery ?? 10_000;
  const started = performance.now();
  let reported = 0;
  const onProgress = (checked: number) => {
    if (Math.floor(checked / every) > Math.floor(reported / every)) {
      out.write(`audit verify: ${checked} events checked\n`);
    }
    reported = checked;
  };
  let report: Awaited<ReturnType<typeof verifyAuditChain>>;
  try {
    report = await verifyAuditChain(db, {
      onProgress,
      ...(options.pageSize ? { pageSize: options.pageSize } : {}),
    });
  } catch (err) {
    out.write(`audit verify: could not read the audit log: ${messageOf(err)}\n`);
    return 2;
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  if (report.ok) {
    const head = report.head ? `; head seq ${report.head.seq}, hash ${report.head.hash}` : "";
    out.write(`audit chain intact: ${report.count} events in ${seconds} s${head}\n`);
    return 0;
  }
  const { seq, id, reason, message } = report.firstBroken;
  out.write(
    `audit chain BROKEN at event seq ${seq} (id ${id}): ${reason}: ${message} ` +
      `(${report.count} events before it verified)\n`,
  );
  return 1;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
