import { sealContext as consoleSessionContext } from "../console/sessions.js";
import { coreSecretContext } from "../gateway/plugins.js";
import { sealContext as settingContext } from "../settings/effective.js";

/**
 * Every database column that holds values sealed with the secret box, in one
 * list: `traitgate keys rotate` walks exactly these. An area that starts
 * storing sealed values adds one entry here, with the same context its own
 * code seals and opens with (docs/encryption.md, "What is encrypted").
 */

export interface SealedColumn {
  /** Table name (a plain lower-case SQL identifier). */
  table: string;
  /** The table's primary key: unique, ordered, never changed (keyset pagination walks it). */
  idColumn: string;
  /** The column holding sealed values (NULL = nothing stored). */
  column: string;
  /** The secret box context of the value in the row with this id. */
  contextOf(id: string): string;
}

/** `users.mfa_secret:<user id>`, as src/identity/mfa.ts seals it. */
const mfaContext = (userId: string) => `users.mfa_secret:${userId}`;

export const sealedColumns: readonly SealedColumn[] = [
  // TOTP secret of a user with MFA on.
  { table: "users", idColumn: "id", column: "mfa_secret", contextOf: mfaContext },
  // Enrolled, not yet activated: same context, because activation copies the
  // sealed value into mfa_secret unchanged.
  { table: "users", idColumn: "id", column: "mfa_pending_secret", contextOf: mfaContext },
  // Secret platform settings (`settings:<key>`, src/settings/effective.ts); NULL for plain ones.
  { table: "settings", idColumn: "key", column: "sealed", contextOf: settingContext },
  // The secret the core presents to each operator plugin (src/gateway/plugins.ts).
  { table: "plugins", idColumn: "id", column: "core_secret_sealed", contextOf: coreSecretContext },
  // The tokens and API key behind each admin console session (src/console/sessions.ts).
  {
    table: "console_sessions",
    idColumn: "id_hash",
    column: "sealed",
    contextOf: consoleSessionContext,
  },
];

/** `users.mfa_secret`: how reports name a column. */
export const columnName = (c: Pick<SealedColumn, "table" | "column">): string =>
  `${c.table}.${c.column}`;
