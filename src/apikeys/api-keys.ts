import { randomUUID } from "node:crypto";
import { requestFields } from "../audit/event.js";
import type { AuditEventInput, AuditWriter, RequestOrigin } from "../audit/index.js";
import { DomainError, invalidArgument, permissionDenied } from "../errors.js";
import type { Queryable, Session } from "../storage/index.js";
import { type ApiKeyRecord, type ApiKeyStatusFilter, createApiKeyStore } from "./api-key-store.js";
import { generateKey, keyType } from "./key-format.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { checkScopes } from "./scopes.js";
import type { ApiKeyClock } from "./verifier.js";

/**
 * API key management: create (the key is returned once), list, get, revoke. Every action is
 * committed to the audit log before the caller gets an answer (fail closed); the role and
 * scope checks of the API are the auth interceptor's (src/apikeys/service.ts). No transport
 * types here; the command line calls this too.
 */

/** Who acts: an authenticated caller (with the API key they presented) or the command line. */
export type ApiKeyActor =
  | {
      type: "user" | "service";
      id: string;
      /** The key presented with the call; a key cannot create a key with scopes it lacks. */
      apiKey?: { id: string; scopes: readonly string[]; expiresAt?: Date | null } | undefined;
    }
  | { type: "system" };

export interface ApiKeyRequestMeta {
  requestId: string | null;
  /** Where the request came from (absent on the command line). */
  origin?: RequestOrigin | undefined;
}

export interface CreateApiKeyInput {
  name: string;
  scopes: readonly string[];
  /** Absent: the key never expires (until revoked). */
  expiresAt?: Date | undefined;
}

export interface ListApiKeysInput {
  /** 1–200; 0 or undefined means {@link defaultPageSize}. */
  pageSize?: number | undefined;
  pageToken?: string | undefined;
  status?: ApiKeyStatusFilter;
}

export type ApiKeyStatus = "active" | "revoked" | "expired";

export interface ApiKeys {
  /** The new key's record and the key itself, which nothing returns again. */
  create(
    actor: ApiKeyActor,
    meta: ApiKeyRequestMeta,
    input: CreateApiKeyInput,
  ): Promise<{ record: ApiKeyRecord; key: string }>;
  list(
    actor: ApiKeyActor,
    meta: ApiKeyRequestMeta,
    input: ListApiKeysInput,
  ): Promise<{ keys: ApiKeyRecord[]; nextPageToken: string }>;
  get(actor: ApiKeyActor, meta: ApiKeyRequestMeta, input: { keyId: string }): Promise<ApiKeyRecord>;
  /** Revokes the key (idempotent: a revoked key stays as it was) and returns it. */
  revoke(
    actor: ApiKeyActor,
    meta: ApiKeyRequestMeta,
    input: { keyId: string },
  ): Promise<ApiKeyRecord>;
  statusOf(key: ApiKeyRecord): ApiKeyStatus;
}

export interface ApiKeysDeps {
  /** Where keys live; a creation or revocation and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  clock: ApiKeyClock;
  /** Drops the verifier's cached state of a key (after a revocation), so it applies at once. */
  forget: (prefix: string) => void;
}

export const defaultPageSize = 50;
export const maxPageSize = 200;
/** The longest lifetime a key can be given: 365 days (keys without expiry are allowed). */
export const maxLifetimeMs = 365 * 24 * 3600 * 1000;
export const maxNameLength = 100;
const namePattern = /^[^\p{Cc}]+$/u;

const keyNotFound = (): DomainError =>
  new DomainError("not_found", "API_KEY_NOT_FOUND", "no API key has this id", {
    field: "key_id",
  });

/** What the audit log keeps of a key: never the key or its hash. */
const auditView = (key: ApiKeyRecord) => ({
  name: key.name,
  prefix: `${keyType}_${key.prefix}`,
  scopes: key.scopes,
  expires_at: key.expiresAt?.toISOString() ?? null,
});

export function createApiKeys(deps: ApiKeysDeps): ApiKeys {
  const { db, audit, clock, forget } = deps;
  const store = createApiKeyStore(db);

  const eventOf = (
    actor: ApiKeyActor,
    meta: ApiKeyRequestMeta,
    event: Pick<AuditEventInput, "action" | "target" | "outcome" | "details">,
  ): AuditEventInput => ({
    ...event,
    actorType: actor.type,
    actorId: actor.type === "system" ? null : actor.id,
    ...requestFields(meta),
    details: {
      ...event.details,
      ...(actor.type !== "system" && actor.apiKey ? { api_key_id: actor.apiKey.id } : {}),
      ...(actor.type === "system" ? { via: "cli" } : {}),
    },
  });
  const write = (
    actor: ApiKeyActor,
    meta: ApiKeyRequestMeta,
    event: Pick<AuditEventInput, "action" | "target" | "outcome" | "details">,
  ) => audit.write(eventOf(actor, meta, event));

  function statusOf(key: ApiKeyRecord): ApiKeyStatus {
    if (key.revokedAt !== null) return "revoked";
    if (key.expiresAt !== null && key.expiresAt.getTime() <= clock.now()) return "expired";
    return "active";
  }

  function checkName(name: string): string {
    const trimmed = name.trim();
    if (trimmed === "" || trimmed.length > maxNameLength || !namePattern.test(trimmed)) {
      throw invalidArgument(
        "INVALID_FIELD",
        `name must be 1–${maxNameLength} characters without control characters`,
        { field: "name" },
      );
    }
    return trimmed;
  }

  function checkExpiry(expiresAt: Date | undefined, now: number): Date | null {
    if (expiresAt === undefined) return null;
    const at = expiresAt.getTime();
    if (!Number.isFinite(at) || at <= now || at > now + maxLifetimeMs) {
      throw invalidArgument(
        "INVALID_FIELD",
        "expires_at must be in the future and at most 365 days from now",
        { field: "expires_at" },
      );
    }
    return new Date(at);
  }

  async function existing(keyId: string): Promise<ApiKeyRecord> {
    const key = await store.get(keyId);
    if (key === undefined) throw keyNotFound();
    return key;
  }

  return {
    statusOf,

    async create(actor, meta, input) {
      const name = checkName(input.name);
      const scopes = checkScopes(input.scopes);
      const now = clock.now();
      const expiresAt = checkExpiry(input.expiresAt, now);
      if (actor.type !== "system" && actor.apiKey !== undefined) {
        const held = actor.apiKey.scopes;
        const missing = scopes.filter((s) => !held.includes(s));
        if (missing.length > 0) {
          await write(actor, meta, {
            action: "api_key_create",
            target: null,
            outcome: "denied",
            details: { name, scopes, reason: "SCOPE_ESCALATION", missing_scopes: missing },
          });
          throw permissionDenied(
            "SCOPE_ESCALATION",
            `a key can only create keys with scopes it holds itself; missing: ${missing.join(", ")}`,
            { field: "scopes", metadata: { missing_scopes: missing.join(",") } },
          );
        }
        // Nor may it create one that outlives it (a leaked key could otherwise renew itself).
        const limit = actor.apiKey.expiresAt;
        if (limit && (expiresAt === null || expiresAt.getTime() > limit.getTime())) {
          await write(actor, meta, {
            action: "api_key_create",
            target: null,
            outcome: "denied",
            details: { name, scopes, reason: "LIFETIME_ESCALATION" },
          });
          throw permissionDenied(
            "LIFETIME_ESCALATION",
            `a key can only create keys that expire no later than itself (${limit.toISOString()})`,
            { field: "expires_at" },
          );
        }
      }
      for (let attempt = 0; attempt < 5; attempt++) {
        const { key, prefix, secretHash } = generateKey();
        const id = randomUUID();
        // The key and its audit event commit together, or neither does.
        const record = await db.transaction(async (tx) => {
          const inTx = createApiKeyStore(tx);
          const inserted = await inTx.insert({
            id,
            name,
            prefix,
            secretHash,
            scopes,
            createdBy: actor.type === "system" ? null : actor.id,
            createdAt: new Date(now),
            expiresAt,
          });
          if (!inserted) return undefined;
          const created = await inTx.get(id);
          if (created === undefined) throw new Error("an inserted API key is not there");
          await audit.writeIn(
            tx,
            eventOf(actor, meta, {
              action: "api_key_create",
              target: `api_key:${id}`,
              outcome: "success",
              details: auditView(created),
            }),
          );
          return created;
        });
        if (record === undefined) continue;
        return { record, key };
      }
      throw new Error("could not draw an unused API key prefix in 5 attempts");
    },

    async list(actor, meta, input) {
      const limit = input.pageSize || defaultPageSize;
      if (!Number.isInteger(limit) || limit < 1 || limit > maxPageSize) {
        throw invalidArgument("INVALID_FIELD", `page_size must be 1–${maxPageSize}`, {
          field: "page_size",
        });
      }
      const filter = input.status ?? "";
      const after = input.pageToken ? decodePageToken(input.pageToken, filter) : undefined;
      const page = await store.list({
        limit,
        after,
        status: input.status,
        now: new Date(clock.now()),
      });
      await write(actor, meta, {
        action: "api_key_list",
        target: null,
        outcome: "success",
        details: { status: filter || "all", count: page.keys.length },
      });
      return {
        keys: page.keys,
        nextPageToken: page.nextAfter === undefined ? "" : encodePageToken(page.nextAfter, filter),
      };
    },

    async get(actor, meta, input) {
      const key = await existing(input.keyId);
      await write(actor, meta, {
        action: "api_key_get",
        target: `api_key:${key.id}`,
        outcome: "success",
        details: {},
      });
      return key;
    },

    async revoke(actor, meta, input) {
      // The revocation and its audit event commit together, or neither does.
      const revoked = await db.transaction(async (tx) => {
        const done = await createApiKeyStore(tx).revoke(
          input.keyId,
          actor.type === "system" ? null : actor.id,
          new Date(clock.now()),
        );
        if (done === undefined) throw keyNotFound();
        await audit.writeIn(
          tx,
          eventOf(actor, meta, {
            action: "api_key_revoke",
            target: `api_key:${done.key.id}`,
            outcome: "success",
            details: { ...auditView(done.key), already_revoked: done.wasRevoked },
          }),
        );
        return done;
      });
      forget(revoked.key.prefix);
      return revoked.key;
    },
  };
}
