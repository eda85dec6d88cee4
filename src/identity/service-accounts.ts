import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { auditedChanges } from "../audit/audited-change.js";
import type { AuditWriter } from "../audit/index.js";
import { DomainError, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import type { Queryable, Session } from "../storage/index.js";
import type { RequestMeta } from "./identity.js";
import {
  createServiceAccountStore,
  type ServiceAccountChanges,
  type ServiceAccountRecord,
} from "./service-account-store.js";
import { type LoginThrottle, tooManyAttempts } from "./throttle.js";
import type { Clock, IssuedToken, TokenService } from "./tokens.js";
import { type AdminActor, type AdminRequestMeta, auditActor } from "./user-admin.js";

/**
 * Service accounts: non-human principals (internal services such as `ai-core`)
 * with roles, which exchange a client id and secret for a short-lived access
 * token (OAuth 2.0 client credentials). Their tokens carry `kind: "service"`
 * and no session; validation checks the account's active flag and roles like
 * a user's. Administration is audited like user administration: each change
 * commits with its audit event or not at all. No transport types here.
 */

/** A service account as callers see it: never its secret hashes. */
export type ServiceAccount = Omit<ServiceAccountRecord, "secretHash" | "previousSecretHash">;

export interface ServiceAccountList {
  accounts: ServiceAccount[];
  /** Empty on the last page. */
  nextPageToken: string;
}

export interface ServiceAccounts {
  /** Is there a service account with this name? */
  exists(name: string): Promise<boolean>;
  /** Client credentials → a short-lived access token; INVALID_CLIENT for anything wrong. */
  issueToken(clientId: string, clientSecret: string, meta: RequestMeta): Promise<IssuedToken>;
  create(
    actor: AdminActor,
    meta: AdminRequestMeta,
    input: { name: string; description: string; roles: readonly string[] },
  ): Promise<{ account: ServiceAccount; clientSecret: string }>;
  list(
    actor: AdminActor,
    meta: AdminRequestMeta,
    input: { pageSize?: number; pageToken?: string },
  ): Promise<ServiceAccountList>;
  get(actor: AdminActor, meta: AdminRequestMeta, id: string): Promise<ServiceAccount>;
  update(
    actor: AdminActor,
    meta: AdminRequestMeta,
    id: string,
    changes: ServiceAccountChanges,
  ): Promise<ServiceAccount>;
  /** A new secret; the old one keeps working for `graceSeconds` (0: not at all). */
  rotateSecret(
    actor: AdminActor,
    meta: AdminRequestMeta,
    id: string,
    graceSeconds: number,
  ): Promise<{ account: ServiceAccount; clientSecret: string }>;
  delete(actor: AdminActor, meta: AdminRequestMeta, id: string): Promise<void>;
}

export interface ServiceAccountsDeps {
  /** Where accounts live; each change and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  tokens: Pick<TokenService, "issue">;
  clock: Clock;
  throttle: LoginThrottle;
  /** `writeIn` for changes (in their transaction), `write` for token requests. */
  audit: Pick<AuditWriter, "write" | "writeIn">;
  log: Logger;
  /** Lifetime of service-account tokens (SERVICE_TOKEN_TTL_SECONDS). */
  tokenTtlSeconds: number;
  /**
   * Is the name taken by another kind of caller (a plugin id)? Service account names and
   * plugin ids are both gateway callers, so they must not collide.
   */
  callerNameTaken?: (name: string) => Promise<boolean>;
  /**
   * Told of a deleted account's name in the deletion's transaction (the gateway removes its
   * allowlist entries there, so that they go with the account or stay with it). What it
   * returns is called once the deletion committed (the gateway forgets the entries it cached).
   */
  onDeleted?: (tx: Queryable, name: string) => Promise<(() => void) | undefined>;
  /**
   * Called after a change committed, so that this process's cached state of the account is
   * dropped.
   */
  forget: (id: string) => void;
}

export const defaultPageSize = 50;
export const maxPageSize = 200;
export const maxGraceSeconds = 7 * 24 * 3600;

/** Secrets are 256 random bits; the prefix makes a leaked one recognisable to scanners. */
const newSecret = (): string => `tgs_${randomBytes(32).toString("base64url")}`;

/**
 * Only a SHA-256 of a secret is stored: with 256 random bits a slow password hash adds
 * cost without adding safety, and token requests stay cheap.
 */
const hashSecret = (secret: string): Buffer => createHash("sha256").update(secret).digest();

/** Compared against when the client id is unknown, so that the answer does the same work. */
const dummyHash = hashSecret(newSecret());

const invalidClient = (): DomainError =>
  unauthenticated("INVALID_CLIENT", "client authentication failed");

const notFound = (): DomainError =>
  new DomainError("not_found", "SERVICE_ACCOUNT_NOT_FOUND", "no service account has this id", {
    field: "service_account_id",
  });

const view = ({ secretHash: _s, previousSecretHash: _p, ...account }: ServiceAccountRecord) =>
  account;

/** What the audit log keeps of an account. */
const auditView = (a: ServiceAccountRecord) => ({
  name: a.name,
  roles: a.roles,
  is_active: a.isActive,
});

export function createServiceAccounts(deps: ServiceAccountsDeps): ServiceAccounts {
  const { db, tokens, clock, throttle, audit, log, forget } = deps;
  const store = createServiceAccountStore(db);

  const audited = auditedChanges({
    db,
    audit,
    store: createServiceAccountStore,
    actorFields: auditActor,
    notFound,
  });

  async function existing(id: string): Promise<ServiceAccountRecord> {
    const account = await store.findById(id);
    if (account === undefined) throw notFound();
    return account;
  }

  /** Does the secret match the current one, or the previous one within its grace period? */
  function secretMatches(account: ServiceAccountRecord | undefined, secret: string): boolean {
    const presented = hashSecret(secret);
    const current = account?.secretHash ?? dummyHash;
    let ok = current.length === presented.length && timingSafeEqual(current, presented);
    const previous = account?.previousSecretHash;
    const until = account?.previousSecretExpiresAt;
    if (previous && until && until.getTime() > clock.now()) {
      ok = (previous.length === presented.length && timingSafeEqual(previous, presented)) || ok;
    }
    return account !== undefined && ok;
  }

  return {
    exists: async (name) => namePattern.test(name) && (await store.findByName(name)) !== undefined,

    async issueToken(clientId, clientSecret, meta) {
      const { clientAddress } = meta;
      const throttleKey = `service:${clientId}`;
      // Looked up beside the reservation; the secret is compared only once it is reserved.
      const lookup = namePattern.test(clientId) ? store.findByName(clientId) : undefined;
      lookup?.catch(() => undefined); // awaited below, unless the attempt is refused
      const decision = await throttle.reserve("password", throttleKey, clientAddress);
      if (decision.kind === "refuse") {
        await audit.write({
          actorType: "anonymous",
          action: "service_token",
          outcome: "denied",
          requestId: meta.requestId,
          origin: meta.origin ?? null,
          details: { cause: "throttled", client_address: clientAddress },
        });
        throw tooManyAttempts(decision.retryAfterMs);
      }
      const { account, secretOk } = await decision.attempt.run(
        async () => {
          const account = await lookup;
          return { account, secretOk: secretMatches(account, clientSecret) };
        },
        (r) => r.account !== undefined && r.secretOk && r.account.isActive,
      );
      if (account === undefined || !secretOk || !account.isActive) {
        const cause = !account ? "unknown_client" : secretOk ? "inactive" : "wrong_secret";
        log.info(
          { event: "service_token_failed", cause, service_account_id: account?.id },
          "service token refused",
        );
        await audit.write({
          actorType: account ? "service" : "anonymous",
          actorId: account?.id ?? null,
          action: "service_token",
          target: account ? `service_account:${account.id}` : null,
          outcome: "failure",
          requestId: meta.requestId,
          origin: meta.origin ?? null,
          details: { cause, client_address: clientAddress },
        });
        throw invalidClient();
      }
      const issued = await tokens.issue({
        kind: "service",
        id: account.id,
        username: account.name,
        roles: account.roles,
        ttlSeconds: deps.tokenTtlSeconds,
      });
      await audit.write({
        actorType: "service",
        actorId: account.id,
        action: "service_token",
        target: `service_account:${account.id}`,
        outcome: "success",
        requestId: meta.requestId,
        origin: meta.origin ?? null,
        details: { client_address: clientAddress, expires_in: issued.expiresIn },
      });
      return issued;
    },

    async create(actor, meta, input) {
      if (await deps.callerNameTaken?.(input.name)) {
        throw new DomainError(
          "already_exists",
          "CALLER_NAME_TAKEN",
          "a plugin has this id; service account names and plugin ids must differ",
          { field: "name" },
        );
      }
      const clientSecret = newSecret();
      const account = await audited(actor, meta, async (inTx) => {
        const created = await inTx.create({
          name: input.name,
          description: input.description,
          roles: [...new Set(input.roles)],
          secretHash: hashSecret(clientSecret),
        });
        return {
          result: created,
          event: {
            action: "service_account_create",
            target: `service_account:${created.id}`,
            details: { after: auditView(created) },
          },
        };
      });
      return { account: view(account), clientSecret };
    },

    async list(_actor, _meta, input) {
      const size = Math.min(maxPageSize, input.pageSize || defaultPageSize);
      const after = decodePageToken(input.pageToken ?? "");
      const rows = await store.list(size + 1, after);
      const page = rows.slice(0, size);
      const last = page.at(-1);
      return {
        accounts: page.map(view),
        nextPageToken: rows.length > size && last ? encodePageToken(last.name) : "",
      };
    },

    async get(_actor, _meta, id) {
      return view(await existing(id));
    },

    async update(actor, meta, id, changes) {
      const after = await audited(actor, meta, async (inTx) => {
        // Locked until the transaction ends: a concurrent change waits, so this is the state
        // the update replaces.
        const before = await inTx.findByIdForUpdate(id);
        if (before === undefined) return undefined;
        const updated = await inTx.update(id, {
          description: changes.description,
          roles: changes.roles === undefined ? undefined : [...new Set(changes.roles)],
          isActive: changes.isActive,
        });
        if (updated === undefined) return undefined;
        return {
          result: updated,
          event: {
            action: "service_account_update",
            target: `service_account:${id}`,
            details: { before: auditView(before), after: auditView(updated) },
          },
        };
      });
      forget(id);
      return view(after);
    },

    async rotateSecret(actor, meta, id, graceSeconds) {
      if (!Number.isInteger(graceSeconds) || graceSeconds < 0 || graceSeconds > maxGraceSeconds) {
        throw new DomainError(
          "invalid_argument",
          "INVALID_GRACE_PERIOD",
          `grace_seconds must be 0 to ${maxGraceSeconds}`,
          { field: "grace_seconds" },
        );
      }
      const clientSecret = newSecret();
      const previousExpiresAt =
        graceSeconds > 0 ? new Date(clock.now() + graceSeconds * 1000) : null;
      const account = await audited(actor, meta, async (inTx) => {
        const rotated = await inTx.rotateSecret(id, hashSecret(clientSecret), previousExpiresAt);
        if (rotated === undefined) return undefined;
        return {
          result: rotated,
          event: {
            action: "service_account_rotate_secret",
            target: `service_account:${id}`,
            details: { name: rotated.name, grace_seconds: graceSeconds },
          },
        };
      });
      return { account: view(account), clientSecret };
    },

    async delete(actor, meta, id) {
      const committed = await audited(actor, meta, async (inTx, tx) => {
        // The account as it was deleted, not as an earlier read saw it.
        const before = await inTx.delete(id);
        if (before === undefined) return undefined;
        // Its allowlist entries go with it, in this transaction.
        const afterCommit = await deps.onDeleted?.(tx, before.name);
        return {
          result: afterCommit,
          event: {
            action: "service_account_delete",
            target: `service_account:${id}`,
            details: { before: auditView(before) },
          },
        };
      });
      forget(id);
      committed?.();
    },
  };
}

/** Service account names (client ids). */
const namePattern = /^[a-z0-9][a-z0-9-]{1,62}$/;

const encodePageToken = (name: string): string => Buffer.from(name).toString("base64url");

function decodePageToken(token: string): string | undefined {
  if (token === "") return undefined;
  const name = Buffer.from(token, "base64url").toString();
  if (!namePattern.test(name)) {
    throw new DomainError("invalid_argument", "INVALID_PAGE_TOKEN", "page_token is not valid", {
      field: "page_token",
    });
  }
  return name;
}
