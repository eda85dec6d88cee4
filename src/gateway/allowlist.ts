import { requestFields } from "../audit/event.js";
import type { AuditWriter } from "../audit/index.js";
import { DomainError, invalidArgument } from "../errors.js";
import { createStateCache } from "../identity/state-cache.js";
import type { Clock } from "../identity/tokens.js";
import type { Queryable, Session } from "../storage/index.js";
import {
  type AllowlistEntry,
  type AllowlistPair,
  createAllowlistStore,
} from "./allowlist-store.js";
import type { PluginRecord } from "./plugin-store.js";
import { type RegistryActor, type RegistryMeta, registryAuditActor } from "./plugins.js";

/**
 * The operator allowlist: which caller (a plugin id or a service account name)
 * may call which operations of which plugin. Lookups on the gateway's hot path
 * are cached for at most one second, so a change reaches every process sharing
 * the database within a second (at once on the process that made it).
 */

export interface OperatorAllowlist {
  put(
    actor: RegistryActor,
    meta: RegistryMeta,
    entry: { caller: string; target: string; operations: readonly string[] },
  ): Promise<AllowlistEntry>;
  list(filter: { caller?: string; target?: string }): Promise<AllowlistEntry[]>;
  delete(actor: RegistryActor, meta: RegistryMeta, caller: string, target: string): Promise<void>;
  /** The operations `caller` may call on `target` (empty when there is no entry). */
  operationsFor(caller: string, target: string): Promise<ReadonlySet<string>>;
  /**
   * Drops this process's cached lookups of entries removed with a deleted plugin or service
   * account, once the deletion committed, so that one re-created under the same name right
   * after does not inherit them.
   */
  forget(removed: readonly AllowlistPair[]): void;
}

export interface OperatorAllowlistDeps {
  /** Where entries live; a change and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  audit: Pick<AuditWriter, "writeIn">;
  /** The target plugin, to check that the operations exist in its manifest. */
  plugin: (id: string) => Promise<PluginRecord | undefined>;
  /** Is there a plugin or a service account with this name? */
  callerExists: (name: string) => Promise<boolean>;
  clock: Clock;
}

/** Callers and targets are `[a-z0-9-]` names, so a space separates them safely. */
const allowlistKey = (caller: string, target: string) => `${caller} ${target}`;

export function createOperatorAllowlist(deps: OperatorAllowlistDeps): OperatorAllowlist {
  const { db, audit } = deps;
  const store = createAllowlistStore(db);
  const cache = createStateCache<ReadonlySet<string>>(
    async (key) => {
      const [caller = "", target = ""] = key.split(" ");
      return new Set((await store.get(caller, target))?.operations ?? []);
    },
    { ttlMs: 1000, clock: deps.clock },
  );
  return {
    async put(actor, meta, entry) {
      const target = await deps.plugin(entry.target);
      if (target === undefined) {
        throw new DomainError(
          "not_found",
          "PLUGIN_NOT_FOUND",
          `no plugin has the id ${entry.target}`,
          {
            field: "target",
          },
        );
      }
      if (!(await deps.callerExists(entry.caller))) {
        throw new DomainError(
          "not_found",
          "CALLER_NOT_FOUND",
          `no plugin or service account is named ${entry.caller}`,
          { field: "caller" },
        );
      }
      const unknown = entry.operations.filter((op) => !(op in target.manifest.endpoints));
      if (unknown.length > 0) {
        throw invalidArgument(
          "UNKNOWN_OPERATION",
          `${entry.target} has no operation ${unknown.join(", ")} in its manifest`,
          { field: "operations", metadata: { operations: unknown.join(",") } },
        );
      }
      const operations = [...new Set(entry.operations)].sort();
      // The change and its audit event commit together, or neither does.
      const saved = await db.transaction(async (tx) => {
        const inTx = createAllowlistStore(tx);
        const before = await inTx.get(entry.caller, entry.target);
        const put = await inTx.put(entry.caller, entry.target, operations);
        await audit.writeIn(tx, {
          ...registryAuditActor(actor),
          action: "allowlist_put",
          target: `allowlist:${entry.caller}->${entry.target}`,
          outcome: "success",
          ...requestFields(meta),
          details: { before: before?.operations ?? null, after: operations },
        });
        return put;
      });
      cache.forget(allowlistKey(entry.caller, entry.target));
      return saved;
    },

    list: (filter) => store.list(filter),

    async delete(actor, meta, caller, target) {
      await db.transaction(async (tx) => {
        const removed = await createAllowlistStore(tx).delete(caller, target);
        if (removed === undefined) {
          throw new DomainError(
            "not_found",
            "ALLOWLIST_ENTRY_NOT_FOUND",
            "no entry for this caller and target",
            {
              field: "caller",
            },
          );
        }
        await audit.writeIn(tx, {
          ...registryAuditActor(actor),
          action: "allowlist_delete",
          target: `allowlist:${caller}->${target}`,
          outcome: "success",
          ...requestFields(meta),
          details: { before: removed.operations },
        });
      });
      cache.forget(allowlistKey(caller, target));
    },

    operationsFor: (caller, target) => cache.get(allowlistKey(caller, target)),

    forget(removed) {
      for (const { caller, target } of removed) cache.forget(allowlistKey(caller, target));
    },
  };
}
