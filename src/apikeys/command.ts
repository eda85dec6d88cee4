import { parseArgs } from "node:util";
import { DomainError } from "../errors.js";
import type { ApiKeys } from "./api-keys.js";
import { keyType } from "./key-format.js";
import { type ApiKeyScope, allScopes } from "./scopes.js";

/**
 * `traitgate apikeys create --name NAME --scope S [--scope S ...] [--expires-in-days N]`:
 * the way to the first key. The key goes to stdout, alone on its line, so that
 * `KEY=$(traitgate apikeys create ...)` captures it; everything else goes to stderr.
 */

export interface ApiKeysCreateArgs {
  name: string;
  scopes: string[];
  expiresInDays: number | undefined;
  /** `--url`: create it through this running core's admin API instead (src/remote-admin.ts). */
  url: string | undefined;
}

export interface Output {
  write(text: string): unknown;
}

/** The command's options; throws an Error naming a missing or bad one. */
export function parseApiKeysCreateArgs(args: string[]): ApiKeysCreateArgs {
  const { values } = parseArgs({
    args,
    options: {
      name: { type: "string" },
      scope: { type: "string", multiple: true, default: [] },
      "expires-in-days": { type: "string" },
      url: { type: "string" },
    },
    strict: true,
  });
  if (!values.name) throw new Error("apikeys create needs --name");
  if (values.scope.length === 0) {
    throw new Error(`apikeys create needs at least one --scope (${allScopes.join(", ")})`);
  }
  const days = values["expires-in-days"];
  if (days !== undefined && (!/^[1-9]\d{0,2}$/.test(days) || Number(days) > 365)) {
    throw new Error("--expires-in-days must be a whole number of days, 1–365");
  }
  return {
    name: values.name,
    scopes: values.scope,
    expiresInDays: days === undefined ? undefined : Number(days),
    url: values.url,
  };
}

const dayMs = 24 * 3600 * 1000;

/** When a key created now for `days` days expires; undefined: never. */
export const expiryOf = (days: number | undefined, now: number): Date | undefined =>
  days === undefined ? undefined : new Date(now + days * dayMs);

/** The command's option for each field the domain names. */
const optionOfField: Record<string, string> = {
  name: "--name",
  scopes: "--scope",
  expires_at: "--expires-in-days",
};

/**
 * Creates the key as the system actor (audited with `via: "cli"`). Returns the exit code: 0,
 * or 2 when the domain refused the input (the message names the option).
 */
export async function runApiKeysCreate(
  apiKeys: ApiKeys,
  args: ApiKeysCreateArgs,
  io: { stdout: Output; stderr: Output; now?: () => number },
): Promise<number> {
  const now = io.now?.() ?? Date.now();
  try {
    const { record, key } = await apiKeys.create(
      { type: "system" },
      { requestId: null },
      {
        name: args.name,
        scopes: args.scopes,
        expiresAt: expiryOf(args.expiresInDays, now),
      },
    );
    io.stdout.write(`${key}\n`);
    io.stderr.write(
      `created API key ${record.id} (${keyType}_${record.prefix}) "${record.name}" with ` +
        `scopes ${record.scopes.join(", ")}; ` +
        `${record.expiresAt ? `expires ${record.expiresAt.toISOString()}` : "does not expire"}. ` +
        "The key is shown only this once.\n",
    );
    return 0;
  } catch (err) {
    if (err instanceof DomainError && err.kind === "invalid_argument") {
      const option = optionOfField[err.field ?? ""] ?? "apikeys create";
      io.stderr.write(`traitgate: ${option}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}

export const demoKeyName = "demo";

/**
 * The demo key's scopes: every scope, so that each example of the docs works with it (users,
 * service accounts, settings, audit, API keys, policy, plugins and the operator lane), and so
 * that keys with fewer scopes can be made from it through the API (a key can only pass on the
 * scopes it holds).
 */
export const demoKeyScopes: readonly ApiKeyScope[] = allScopes;

/**
 * Demo mode's key: revokes the demo keys of earlier runs (made on the command line, named
 * "demo"), so that only the one printed now works, and creates a new one.
 */
export async function issueDemoKey(apiKeys: ApiKeys): Promise<{ key: string; id: string }> {
  const system = { type: "system" } as const;
  const meta = { requestId: null };
  let pageToken = "";
  const earlier: string[] = [];
  do {
    const page = await apiKeys.list(system, meta, { status: "active", pageToken });
    for (const k of page.keys) {
      if (k.name === demoKeyName && k.createdBy === null) earlier.push(k.id);
    }
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  for (const keyId of earlier) await apiKeys.revoke(system, meta, { keyId });
  const { record, key } = await apiKeys.create(system, meta, {
    name: demoKeyName,
    scopes: demoKeyScopes,
  });
  return { key, id: record.id };
}
