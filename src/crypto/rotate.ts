import type { Database } from "../storage/index.js";
import { columnName, type SealedColumn, sealedColumns } from "./sealed-columns.js";
import { type SecretBox, SecretBoxError, type SecretBoxErrorReason } from "./secret-box.js";

/**
 * Key rotation of sealed values: every value in every sealed column that was
 * sealed with a key other than the current one is opened and sealed again
 * under the current key. Each column is walked in batches by id (keyset
 * pagination); each batch is written in its own transaction, and a row is
 * written only if it still holds the value that was read, so a concurrent
 * change (a user enrolling again, an admin's reset) is never overwritten.
 * Values already under the current key are left alone, so a run that was
 * interrupted, or one that follows a complete run, just carries on.
 */

/** A value that opens with none of the configured keys. Never carries the value itself. */
export interface UnreadableValue {
  /** `table.column` */
  column: string;
  id: string;
  reason: SecretBoxErrorReason;
  /** UNKNOWN_KEY: the key id the value names (public). */
  keyId?: string;
}

/** Counts for one column, so far or in total. */
export interface ColumnRotation {
  /** `table.column` */
  column: string;
  /** Rows holding a value (NULL values are not counted). */
  checked: number;
  resealed: number;
  /** Values that changed between read and write, and were left as the other writer set them. */
  changedMeanwhile: number;
  unreadable: number;
}

export type RotationProgress =
  | { kind: "batch"; totals: ColumnRotation }
  | { kind: "unreadable"; value: UnreadableValue };

export interface RotationReport {
  columns: ColumnRotation[];
  unreadable: UnreadableValue[];
}

export interface RotateOptions {
  /** Default: every sealed column (src/crypto/sealed-columns.ts). */
  columns?: readonly SealedColumn[];
  /** Rows read and written per transaction (default 500). */
  batchSize?: number;
  onProgress?: (progress: RotationProgress) => void;
}

const identifier = /^[a-z_][a-z0-9_]*$/;

function quoted(name: string): string {
  if (!identifier.test(name)) throw new Error(`sealed column: "${name}" is not a plain identifier`);
  return `"${name}"`;
}

export async function rotateSealedValues(
  db: Database,
  box: SecretBox,
  options: RotateOptions = {},
): Promise<RotationReport> {
  const batchSize = options.batchSize ?? 500;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new Error("batchSize must be a positive integer");
  }
  const emit = options.onProgress ?? (() => undefined);
  const report: RotationReport = { columns: [], unreadable: [] };
  for (const column of options.columns ?? sealedColumns) {
    report.columns.push(await rotateColumn(db, box, column, batchSize, emit, report.unreadable));
  }
  return report;
}

interface Reseal {
  id: string;
  sealed: string;
  resealed: string;
}

async function rotateColumn(
  db: Database,
  box: SecretBox,
  descriptor: SealedColumn,
  batchSize: number,
  emit: (progress: RotationProgress) => void,
  unreadable: UnreadableValue[],
): Promise<ColumnRotation> {
  const table = quoted(descriptor.table);
  const id = quoted(descriptor.idColumn);
  const column = quoted(descriptor.column);
  const select = `SELECT ${id}::text AS id, ${column} AS sealed FROM ${table}
                   WHERE ${column} IS NOT NULL`;
  const firstPage = `${select} ORDER BY ${id} LIMIT $1`;
  const nextPage = `${select} AND ${id} > $2 ORDER BY ${id} LIMIT $1`;
  // Conditional: only if the row still holds the value that was read.
  const update = `UPDATE ${table} SET ${column} = $3 WHERE ${id} = $1 AND ${column} = $2`;

  const totals: ColumnRotation = {
    column: columnName(descriptor),
    checked: 0,
    resealed: 0,
    changedMeanwhile: 0,
    unreadable: 0,
  };
  let after: string | undefined;
  for (;;) {
    const { rows } = await db.query<{ id: string; sealed: string }>(
      after === undefined ? firstPage : nextPage,
      after === undefined ? [batchSize] : [batchSize, after],
    );
    if (rows.length === 0) break;
    after = rows[rows.length - 1]?.id;

    const reseals: Reseal[] = [];
    for (const row of rows) {
      totals.checked++;
      try {
        if (!box.needsRotation(row.sealed)) continue;
        const resealed = box.reseal(row.sealed, descriptor.contextOf(row.id));
        reseals.push({ id: row.id, sealed: row.sealed, resealed });
      } catch (err) {
        if (!(err instanceof SecretBoxError)) throw err;
        const value: UnreadableValue = { column: totals.column, id: row.id, reason: err.reason };
        if (err.keyId !== undefined) value.keyId = err.keyId;
        totals.unreadable++;
        unreadable.push(value);
        emit({ kind: "unreadable", value });
      }
    }
    if (reseals.length > 0) {
      const written = await db.transaction(async (tx) => {
        let count = 0;
        for (const r of reseals) {
          count += (await tx.query(update, [r.id, r.sealed, r.resealed])).rowCount;
        }
        return count;
      });
      totals.resealed += written;
      totals.changedMeanwhile += reseals.length - written;
    }
    emit({ kind: "batch", totals: { ...totals } });
    if (rows.length < batchSize) break;
  }
  return totals;
}
