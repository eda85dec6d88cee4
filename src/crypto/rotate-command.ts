import type { Database } from "../storage/index.js";
import { type RotateOptions, type RotationProgress, rotateSealedValues } from "./rotate.js";
import { createSecretBox, type DataKeys } from "./secret-box.js";

interface Output {
  write(text: string): unknown;
}

export interface KeysRotateCommandOptions {
  /** Progress and problems (stderr). */
  progress: Output;
  /** The summary (stdout). */
  out: Output;
  batchSize?: RotateOptions["batchSize"];
}

/**
 * `traitgate keys rotate`: reseals every value sealed with a key other than
 * DATA_ENCRYPTION_KEY under it, on a migrated database. Prints progress per
 * batch, names (by row id, never by value) what cannot be opened, and returns
 * the exit code: 0 done, 1 some values could not be opened or the run stopped
 * (what was written before stays written; running it again carries on).
 */
export async function runKeysRotateCommand(
  db: Database,
  keys: DataKeys,
  options: KeysRotateCommandOptions,
): Promise<number> {
  const { progress, out } = options;
  const previous = keys.previous.map((k) => k.id);
  progress.write(
    `keys rotate: current key ${keys.current.id}; previous keys: ${
      previous.length > 0
        ? previous.join(", ")
        : "none (values sealed with another key cannot be opened)"
    }\n`,
  );
  const onProgress = (p: RotationProgress) => {
    if (p.kind === "batch") {
      const t = p.totals;
      progress.write(`keys rotate: ${t.column}: ${t.checked} checked, ${t.resealed} resealed\n`);
    } else {
      const { column, id, reason, keyId } = p.value;
      const key = keyId === undefined ? "" : `, key id ${keyId}`;
      progress.write(`keys rotate: ${column}: row ${id} cannot be opened (${reason}${key})\n`);
    }
  };
  let report: Awaited<ReturnType<typeof rotateSealedValues>>;
  try {
    report = await rotateSealedValues(db, createSecretBox(keys), {
      onProgress,
      ...(options.batchSize ? { batchSize: options.batchSize } : {}),
    });
  } catch (err) {
    progress.write(
      `keys rotate: stopped: ${err instanceof Error ? err.message : String(err)} ` +
        "(batches written before stay written; run it again to carry on)\n",
    );
    return 1;
  }

  let changed = 0;
  for (const c of report.columns) {
    changed += c.changedMeanwhile;
    out.write(
      `keys rotate: ${c.column}: ${c.checked} checked, ${c.resealed} resealed, ` +
        `${c.changedMeanwhile} changed meanwhile, ${c.unreadable} unreadable\n`,
    );
  }
  if (report.unreadable.length > 0) {
    out.write(
      `keys rotate: ${report.unreadable.length} value(s) could not be opened (rows named above); ` +
        "keep the keys they need, or have their owners set them again (docs/encryption.md)\n",
    );
    return 1;
  }
  if (changed > 0) {
    out.write(
      `keys rotate: ${changed} value(s) changed while being resealed and were left as written; ` +
        "run keys rotate again to check them\n",
    );
    return 0;
  }
  out.write(`keys rotate: done: every sealed value is under key ${keys.current.id}\n`);
  return 0;
}
