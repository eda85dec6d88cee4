import { parseArgs } from "node:util";
import type { Queryable } from "../storage/index.js";
import { type Checkpoint, checkSignature, parseCheckpoint } from "./checkpoint.js";
import {
  type CheckpointReport,
  createCheckpointCheck,
  type ExpectedHead,
  type ExpectedHeadResult,
} from "./checkpoint-check.js";
import type { CheckpointPublicKey } from "./checkpoint-keys.js";
import { verifyAuditChain } from "./verify.js";

export interface AuditVerifyArgs {
  /** --expect-head SEQ:HASH (repeatable). */
  expectHeads: ExpectedHead[];
  /** --expect-checkpoint JSON (repeatable): signed heads, e.g. "audit checkpoint" log lines. */
  expectCheckpoints: Checkpoint[];
}

export interface AuditVerifyCommandOptions extends Partial<AuditVerifyArgs> {
  /** Print a progress line every this many events (default 10,000). */
  progressEvery?: number;
  pageSize?: number;
  /** The public keys checkpoints verify with (config.auditCheckpoints.keys.trusted). */
  trustedKeys?: readonly CheckpointPublicKey[];
}

/**
 * `traitgate audit verify [--expect-head SEQ:HASH] [--expect-checkpoint JSON]`'s options.
 * Throws an Error naming the option when one is malformed (the command exits 2).
 */
export function parseAuditVerifyArgs(args: readonly string[]): AuditVerifyArgs {
  const { values } = parseArgs({
    args: [...args],
    options: {
      "expect-head": { type: "string", multiple: true, default: [] },
      "expect-checkpoint": { type: "string", multiple: true, default: [] },
    },
    strict: true,
    allowPositionals: false,
  });
  const expectHeads = values["expect-head"].map((value) => {
    const match = /^(0|[1-9][0-9]{0,18}):([0-9a-f]{64})$/.exec(value.trim());
    if (!match?.[1] || !match[2]) {
      throw new Error("--expect-head must be SEQ:HASH (a seq and 64 lower-case hex digits)");
    }
    return { seq: match[1], hash: match[2] };
  });
  const expectCheckpoints = values["expect-checkpoint"].map((value) => {
    try {
      return parseCheckpoint(JSON.parse(value));
    } catch (err) {
      throw new Error(
        '--expect-checkpoint must be a checkpoint in JSON (an "audit checkpoint" log line or ' +
          `its "checkpoint" object): ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  });
  return { expectHeads, expectCheckpoints };
}

/**
 * `traitgate audit verify`: checks the whole chain on a migrated database, printing progress
 * on long chains, then the checkpoints and the expected heads. Returns the process exit code:
 * 0 intact, 1 broken, truncated or an invalid checkpoint (the lines say which), 2 the check
 * could not run.
 */
export async function runAuditVerifyCommand(
  db: Queryable,
  out: { write(text: string): unknown },
  options: AuditVerifyCommandOptions = {},
): Promise<number> {
  const trusted = options.trustedKeys ?? [];
  let failed = false;
  const expected = [...(options.expectHeads ?? [])];
  for (const checkpoint of options.expectCheckpoints ?? []) {
    const signature = checkSignature(checkpoint, trusted);
    if (signature === "valid") {
      expected.push({ seq: checkpoint.seq, hash: checkpoint.hash });
      continue;
    }
    failed = true;
    out.write(
      `expected checkpoint of seq ${checkpoint.seq} (${checkpoint.time}, key ` +
        `${checkpoint.keyId}) NOT TRUSTED: ${signature}: ` +
        (signature === "unknown_key"
          ? "no configured public key has this id\n"
          : "its signature does not verify\n"),
    );
  }
  const every = options.progressEvery ?? 10_000;
  const started = performance.now();
  let reported = 0;
  const onProgress = (checked: number) => {
    if (Math.floor(checked / every) > Math.floor(reported / every)) {
      out.write(`audit verify: ${checked} events checked\n`);
    }
    reported = checked;
  };
  const check = createCheckpointCheck({ trusted, expected });
  let report: Awaited<ReturnType<typeof verifyAuditChain>>;
  try {
    report = await verifyAuditChain(db, {
      onProgress,
      onEvent: check.observe,
      ...(options.pageSize ? { pageSize: options.pageSize } : {}),
    });
  } catch (err) {
    out.write(`audit verify: could not read the audit log: ${messageOf(err)}\n`);
    return 2;
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  if (!report.ok) {
    const { seq, id, reason, message } = report.firstBroken;
    out.write(
      `audit chain BROKEN at event seq ${seq} (id ${id}): ${reason}: ${message} ` +
        `(${report.count} events before it verified)\n`,
    );
    return 1;
  }
  const head = report.head ? `; head seq ${report.head.seq}, hash ${report.head.hash}` : "";
  out.write(`audit chain intact: ${report.count} events in ${seconds} s${head}\n`);
  const checkpoints = check.finish();
  out.write(checkpointLine(checkpoints));
  for (const problem of checkpoints.problems) {
    out.write(
      `audit checkpoint INVALID at event seq ${problem.seq} (id ${problem.id}): ` +
        `${problem.reason}: ${problem.message}\n`,
    );
  }
  const more = checkpoints.problemCount - checkpoints.problems.length;
  if (more > 0) out.write(`... and ${more} more invalid checkpoints\n`);
  for (const result of checkpoints.expected) out.write(expectedLine(result, report.head));
  const cut = checkpoints.expected.some((result) => result.status !== "present");
  return failed || cut || checkpoints.problemCount > 0 ? 1 : 0;
}

function checkpointLine(report: CheckpointReport): string {
  if (report.newest === null) {
    return (
      "audit checkpoints: none verified; events removed from the end of the log cannot be " +
      "detected here (give a head kept elsewhere with --expect-head or --expect-checkpoint)\n"
    );
  }
  const { eventSeq, checkpoint } = report.newest;
  const tail =
    report.uncovered === 0
      ? "0 events after it"
      : `${report.uncovered} events after it, which no checkpoint covers`;
  return (
    `audit checkpoints: ${report.verified} verified; the newest (event seq ${eventSeq}) ` +
    `signs head seq ${checkpoint.seq} at ${checkpoint.time} with key ${checkpoint.keyId}; ` +
    `${tail}\n`
  );
}

function expectedLine(
  result: ExpectedHeadResult,
  head: { seq: string; hash: string } | null,
): string {
  const named = `expected head seq ${result.seq} (hash ${result.hash})`;
  switch (result.status) {
    case "present":
      return `${named}: present\n`;
    case "truncated":
      return (
        `audit log TRUNCATED: ${named} is not in the chain, which ` +
        (head ? `ends at seq ${head.seq}: events after it were removed\n` : "is empty\n")
      );
    case "missing":
      return (
        `audit log CHANGED: ${named} is missing: the event was removed, or the chain ` +
        "rewritten from it on\n"
      );
    case "hash_mismatch":
      return (
        `audit log CHANGED: event seq ${result.seq} has hash ${result.found}, not the ` +
        `${named}: the chain was rewritten up to it\n`
      );
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
