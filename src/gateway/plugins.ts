import { createHash, randomBytes } from "node:crypto";
import { auditedChanges } from "../audit/audited-change.js";
import type { AuditWriter, RequestOrigin } from "../audit/index.js";
import type { SecretBox } from "../crypto/secret-box.js";
import { DomainError, unauthenticated } from "../errors.js";
import type { StateCache } from "../identity/state-cache.js";
import type { Queryable, Session } from "../storage/index.js";
import type { HostPolicy } from "./host-policy.js";
import { checkManifest, type PluginManifest } from "./manifest.js";
import { createPluginStore, type PluginRecord } from "./plugin-store.js";

/**
 * The plugin registry: what an admin may do with plugins, how a plugin proves
 * who it is to the gateway, and the secret the core shows the plugin. No
 * transport types here.
 */

/** A plugin as callers see it: no credential hash, no secret. */
export interface Plugin {
  manifest: PluginManifest;
  enabled: boolean;
  unlistedHost: boolean;
  credentialsIssuedAt: Date;
  createdAt: Date;
  updatedAt: Date;
}

/** Shown once, at registration and rotation. */
export interface PluginCredentials {
  /** What the plugin presents to the gateway (`Authorization: Bearer tgp_…`). */
  credential: string;
  /** What the core presents to the plugin (`Authorization: Bearer tgc_…`). */
  coreSecret: string;
}

/** The administrator making a change; "system" for the command line and the demo setup. */
export interface RegistryActor {
  kind: "user" | "service" | "system";
  id: string;
}

/** The audit log's actor fields for a registry actor. */
export const registryAuditActor = (actor: RegistryActor) => ({
  actorType: actor.kind,
  actorId: actor.kind === "system" ? null : actor.id,
});

export interface RegistryMeta {
  requestId: string;
  /** Where the request came from (absent outside a request). */
  origin?: RequestOrigin | undefined;
}

/** The manifest as an admin sends it (unchecked). */
export type ManifestInput = Parameters<typeof checkManifest>[0];

export interface PluginRegistry {
  register(
    actor: RegistryActor,
    meta: RegistryMeta,
    input: ManifestInput,
    allowUnlistedHost: boolean,
  ): Promise<{ plugin: Plugin; credentials: PluginCredentials }>;
  list(): Promise<Plugin[]>;
  /** Is there a plugin with this id (enabled or not)? */
  exists(id: string): Promise<boolean>;
  get(id: string): Promise<Plugin>;
  /**
   * Replaces the manifest. A new host gets new secrets (returned once): the old core
   * secret is never sent to a host other than the one it was issued for.
   */
  update(
    actor: RegistryActor,
    meta: RegistryMeta,
    input: ManifestInput,
    allowUnlistedHost: boolean,
  ): Promise<{ plugin: Plugin; credentials: PluginCredentials | undefined }>;
  setEnabled(
    actor: RegistryActor,
    meta: RegistryMeta,
    id: string,
    enabled: boolean,
  ): Promise<Plugin>;
  delete(actor: RegistryActor, meta: RegistryMeta, id: string): Promise<void>;
  rotateCredentials(
    actor: RegistryActor,
    meta: RegistryMeta,
    id: string,
  ): Promise<{ plugin: Plugin; credentials: PluginCredentials }>;
  /**
   * The plugin a `tgp_…` credential belongs to; unauthenticated
   * (PLUGIN_CREDENTIAL_INVALID) when none does or the plugin is disabled.
   */
  authenticate(credential: string): Promise<PluginManifest>;
  /** The secret the core presents to this plugin. */
  coreSecret(plugin: PluginRecord): string;
}

export interface PluginRegistryDeps {
  /** Where plugins live; each change and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  box: SecretBox;
  audit: Pick<AuditWriter, "writeIn">;
  /** Where a manifest's host may point (PLUGIN_ALLOWED_HOSTS and the address classes). */
  hosts: Pick<HostPolicy, "check">;
  /** Throws PLUGIN_IS_CORE when the host's addresses and port are the core's own listener. */
  refuseCore?: (host: string, addresses: readonly string[], port: number) => Promise<void>;
  /** The policy's trait registry check (invalid_argument naming `field` when unregistered). */
  checkTrait: (trait: string, field: string) => void;
  /** The registry's cached view of plugins by id and by credential hash (≤ 1 s old). */
  byId: StateCache<PluginRecord | null>;
  byCredential: StateCache<PluginRecord | null>;
  /** Does a service account have this name? Plugin ids and caller names must not collide. */
  isServiceAccountName: (name: string) => Promise<boolean>;
  /**
   * Removes the allowlist entries naming a deleted plugin (as caller or as target) in the
   * deletion's transaction; what it returns forgets them on this process, once committed.
   */
  removeAllowlistEntries: (tx: Queryable, name: string) => Promise<() => void>;
  /** Allowlist entries naming operations of this plugin, to refuse removing them. */
  operationsInUse: (pluginId: string) => Promise<Set<string>>;
}

export const credentialPrefix = "tgp_";
const coreSecretPrefix = "tgc_";
const secret = (prefix: string) => `${prefix}${randomBytes(32).toString("base64url")}`;

/** SHA-256: the credential is 256 random bits, so a slow hash would add nothing. */
export const hashCredential = (credential: string): Buffer =>
  createHash("sha256").update(credential).digest();

/** The secret box context of a plugin's core secret (also walked by `traitgate keys rotate`). */
export const coreSecretContext = (id: string) => `plugin:${id}:core_secret`;

const notFound = () =>
  new DomainError("not_found", "PLUGIN_NOT_FOUND", "no plugin has this id", { field: "plugin_id" });

const view = (r: PluginRecord): Plugin => ({
  manifest: r.manifest,
  enabled: r.enabled,
  unlistedHost: r.unlistedHost,
  credentialsIssuedAt: r.credentialsIssuedAt,
  createdAt: r.createdAt,
  updatedAt: r.updatedAt,
});

const auditView = (m: PluginManifest) => ({
  plugin_type: m.pluginType,
  traits: m.traits,
  operations: Object.keys(m.endpoints),
  host: m.host,
  port: m.port,
});

export function createPluginRegistry(deps: PluginRegistryDeps): PluginRegistry {
  const { db, box, audit, byId, byCredential } = deps;
  const store = createPluginStore(db);

  const audited = auditedChanges({
    db,
    audit,
    store: createPluginStore,
    actorFields: registryAuditActor,
    notFound,
  });

  const newCredentials = (id: string) => {
    const credentials = {
      credential: secret(credentialPrefix),
      coreSecret: secret(coreSecretPrefix),
    };
    return {
      credentials,
      credentialHash: hashCredential(credentials.credential),
      coreSecretSealed: box.seal(credentials.coreSecret, coreSecretContext(id)),
    };
  };

  const forget = (r: PluginRecord | undefined) => {
    if (r === undefined) return;
    byId.forget(r.manifest.id);
    byCredential.forget(r.credentialHash.toString("hex"));
  };

  async function existing(id: string): Promise<PluginRecord> {
    const found = await store.find(id);
    if (found === undefined) throw notFound();
    return found;
  }

  return {
    async register(actor, meta, input, allowUnlistedHost) {
      const manifest = checkManifest(input, { checkTrait: deps.checkTrait });
      const { unlistedHost, addresses } = await deps.hosts.check(manifest.host, allowUnlistedHost);
      await deps.refuseCore?.(manifest.host, addresses, manifest.port);
      if (await deps.isServiceAccountName(manifest.id)) {
        throw new DomainError(
          "already_exists",
          "CALLER_NAME_TAKEN",
          "a service account has this name; plugin ids and caller names must differ",
          { field: "manifest.id" },
        );
      }
      const fresh = newCredentials(manifest.id);
      const created = await audited(actor, meta, async (inTx) => ({
        result: await inTx.create({
          manifest,
          unlistedHost,
          credentialHash: fresh.credentialHash,
          coreSecretSealed: fresh.coreSecretSealed,
        }),
        event: {
          action: "plugin_register",
          target: `plugin:${manifest.id}`,
          details: { after: auditView(manifest), unlisted_host: unlistedHost },
        },
      }));
      byId.forget(manifest.id);
      return { plugin: view(created), credentials: fresh.credentials };
    },

    async list() {
      return (await store.list()).map(view);
    },

    exists: async (id) => (await store.find(id)) !== undefined,

    async get(id) {
      return view(await existing(id));
    },

    async update(actor, meta, input, allowUnlistedHost) {
      const before = await existing(input.id);
      const manifest = checkManifest(input, { checkTrait: deps.checkTrait });
      const { unlistedHost, addresses } = await deps.hosts.check(manifest.host, allowUnlistedHost);
      await deps.refuseCore?.(manifest.host, addresses, manifest.port);
      const inUse = await deps.operationsInUse(manifest.id);
      const dropped = [...inUse].filter((op) => !(op in manifest.endpoints));
      if (dropped.length > 0) {
        throw new DomainError(
          "failed_precondition",
          "OPERATION_IN_USE",
          `allowlist entries still name ${dropped.join(", ")}; remove them first`,
          { field: "manifest.endpoints", metadata: { operations: dropped.join(",") } },
        );
      }
      const fresh =
        before.manifest.host !== manifest.host ? newCredentials(manifest.id) : undefined;
      const after = await audited(actor, meta, async (inTx) => {
        const updated = await inTx.updateManifest(manifest, unlistedHost, fresh);
        if (updated === undefined) return undefined;
        return {
          result: updated,
          event: {
            action: "plugin_update",
            target: `plugin:${manifest.id}`,
            details: {
              before: auditView(before.manifest),
              after: auditView(manifest),
              unlisted_host: unlistedHost,
              credentials_rotated: fresh !== undefined,
            },
          },
        };
      });
      forget(before);
      return { plugin: view(after), credentials: fresh?.credentials };
    },

    async setEnabled(actor, meta, id, enabled) {
      const after = await audited(actor, meta, async (inTx) => {
        const changed = await inTx.setEnabled(id, enabled);
        if (changed === undefined) return undefined;
        return {
          result: changed,
          event: { action: enabled ? "plugin_enable" : "plugin_disable", target: `plugin:${id}` },
        };
      });
      forget(after);
      return view(after);
    },

    async delete(actor, meta, id) {
      const before = await existing(id);
      const forgetEntries = await audited(actor, meta, async (inTx, tx) => {
        // Its entries go with it, as caller and as target (before ON DELETE CASCADE would
        // remove the latter unseen), so that they are forgotten too.
        const removed = await deps.removeAllowlistEntries(tx, id);
        if (!(await inTx.delete(id))) return undefined;
        return {
          result: removed,
          event: {
            action: "plugin_delete",
            target: `plugin:${id}`,
            details: { before: auditView(before.manifest) },
          },
        };
      });
      forget(before);
      forgetEntries();
    },

    async rotateCredentials(actor, meta, id) {
      const before = await existing(id);
      const fresh = newCredentials(id);
      const after = await audited(actor, meta, async (inTx) => {
        const rotated = await inTx.setCredentials(id, fresh.credentialHash, fresh.coreSecretSealed);
        if (rotated === undefined) return undefined;
        return {
          result: rotated,
          event: { action: "plugin_rotate_credentials", target: `plugin:${id}` },
        };
      });
      forget(before);
      return { plugin: view(after), credentials: fresh.credentials };
    },

    async authenticate(credential) {
      const invalid = () =>
        unauthenticated("PLUGIN_CREDENTIAL_INVALID", "the plugin credential is not valid");
      if (!credential.startsWith(credentialPrefix) || credential.length !== 47) throw invalid();
      const plugin = await byCredential.get(hashCredential(credential).toString("hex"));
      if (plugin === null || !plugin.enabled) throw invalid();
      return plugin.manifest;
    },

    coreSecret: (plugin) =>
      box.openString(plugin.coreSecretSealed, coreSecretContext(plugin.manifest.id)),
  };
}
