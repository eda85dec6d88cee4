import { createHash } from "node:crypto";
import { auditedChanges } from "../audit/audited-change.js";
import type { AuditWriter, RequestOrigin } from "../audit/index.js";
import { DomainError, invalidArgument } from "../errors.js";
import type { Queryable, Session } from "../storage/index.js";
import { checkPasswordPolicy } from "./password-policy.js";
import type { PasswordHasher } from "./passwords.js";
import { createUserStore, type UserChanges, type UserRecord } from "./user-store.js";

/**
 * User administration: what an administrator may do to other users' accounts. Every
 * change commits in one transaction with what it entails (sessions revoked, MFA reset) and
 * its audit event, or not at all (fail closed: 503 AUDIT_UNAVAILABLE when the event cannot
 * be written); the role check is the auth interceptor's (src/identity/user-admin-service.ts).
 * No transport types here.
 */

/** The role every user administration call needs. */
export const adminRole = "admin";

/** The administrator making the call: a user or service account, or the command line. */
export interface AdminActor {
  /** The user's or service account's id; empty for the system (command line). */
  userId: string;
  /** Default "user". */
  kind?: "user" | "service" | "system";
}

/** The audit log's actor fields for an administrator. */
export const auditActor = (actor: AdminActor) =>
  actor.kind === "system"
    ? { actorType: "system" as const, actorId: null }
    : { actorType: actor.kind ?? ("user" as const), actorId: actor.userId };

export interface AdminRequestMeta {
  requestId: string;
  /** Where the request came from (absent on the command line). */
  origin?: RequestOrigin | undefined;
}

export interface CreateUserInput {
  username: string;
  email: string;
  password: string;
  roles: readonly string[];
}

export interface ListUsersInput {
  /** 1–200; 0 or undefined means {@link defaultPageSize}. */
  pageSize?: number | undefined;
  pageToken?: string | undefined;
  role?: string | undefined;
  isActive?: boolean | undefined;
  usernamePrefix?: string | undefined;
}

export interface UserList {
  users: UserRecord[];
  /** Empty on the last page. */
  nextPageToken: string;
}

export interface UpdateUserInput extends UserChanges {
  userId: string;
}

export const defaultPageSize = 50;
export const maxPageSize = 200;

export interface UserAdmin {
  createUser(
    actor: AdminActor,
    meta: AdminRequestMeta,
    input: CreateUserInput,
  ): Promise<UserRecord>;
  listUsers(actor: AdminActor, meta: AdminRequestMeta, input: ListUsersInput): Promise<UserList>;
  getUser(
    actor: AdminActor,
    meta: AdminRequestMeta,
    input: { userId: string },
  ): Promise<UserRecord>;
  updateUser(
    actor: AdminActor,
    meta: AdminRequestMeta,
    input: UpdateUserInput,
  ): Promise<UserRecord>;
  setUserPassword(
    actor: AdminActor,
    meta: AdminRequestMeta,
    input: { userId: string; password: string },
  ): Promise<void>;
  deleteUser(actor: AdminActor, meta: AdminRequestMeta, input: { userId: string }): Promise<void>;
  resetUserMfa(actor: AdminActor, meta: AdminRequestMeta, input: { userId: string }): Promise<void>;
}

export interface UserAdminDeps {
  /** Where users live; each change and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  passwords: Pick<PasswordHasher, "hash">;
  audit: Pick<AuditWriter, "writeIn">;
  /**
   * Called once a change to a user committed, so that this process's cached state of the
   * user, and of the sessions the change revoked, is dropped at once.
   */
  forget: (userId: string, sessionIds: readonly string[]) => void;
  /**
   * Revokes every open session of the user in the change's transaction (on deactivation and
   * on a password set by an admin); their ids.
   */
  revokeSessions: (tx: Queryable, userId: string, reason: string) => Promise<string[]>;
  /**
   * Turns a user's MFA off and deletes its secret and recovery codes, in the change's
   * transaction; was it on?
   */
  resetMfa: (tx: Queryable, userId: string) => Promise<boolean>;
}

const userNotFound = (): DomainError =>
  new DomainError("not_found", "USER_NOT_FOUND", "no user has this id", { field: "user_id" });

const selfLockout = (what: string): DomainError =>
  new DomainError("failed_precondition", "SELF_LOCKOUT", `administrators cannot ${what}`, {
    field: "user_id",
  });

/** What the audit log keeps of a user: no password, no email address (docs/audit.md). */
export const auditView = (user: Pick<UserRecord, "roles" | "isActive">) => ({
  roles: user.roles,
  is_active: user.isActive,
});

export function createUserAdmin(deps: UserAdminDeps): UserAdmin {
  const { db, passwords, audit, forget, revokeSessions, resetMfa } = deps;
  const users = createUserStore(db);

  const audited = auditedChanges({
    db,
    audit,
    store: createUserStore,
    actorFields: auditActor,
    notFound: userNotFound,
  });

  async function existing(userId: string): Promise<UserRecord> {
    const user = await users.getRecord(userId);
    if (user === undefined) throw userNotFound();
    return user;
  }

  return {
    async createUser(actor, meta, input) {
      checkPasswordPolicy(input.password, input.username);
      const passwordHash = await passwords.hash(input.password);
      return audited(actor, meta, async (inTx) => {
        const created = await inTx.create({
          username: input.username,
          email: input.email,
          passwordHash,
          roles: [...new Set(input.roles)],
        });
        const user = await inTx.getRecord(created.id);
        if (user === undefined) throw new Error("a created user is not there");
        return {
          result: user,
          event: {
            action: "user_create",
            target: `user:${user.id}`,
            details: { after: auditView(user) },
          },
        };
      });
    },

    async listUsers(_actor, _meta, input) {
      const limit = input.pageSize || defaultPageSize;
      if (!Number.isInteger(limit) || limit < 1 || limit > maxPageSize) {
        throw invalidArgument("INVALID_FIELD", `page_size must be 1–${maxPageSize}`, {
          field: "page_size",
        });
      }
      const filter = {
        role: input.role || undefined,
        isActive: input.isActive,
        usernamePrefix: input.usernamePrefix || undefined,
      };
      const fingerprint = filterFingerprint(filter);
      const after = input.pageToken ? decodePageToken(input.pageToken, fingerprint) : undefined;
      const page = await users.list({ ...filter, limit, after });
      return {
        users: page.users,
        nextPageToken:
          page.nextAfter === undefined ? "" : encodePageToken(page.nextAfter, fingerprint),
      };
    },

    async getUser(_actor, _meta, input) {
      return existing(input.userId);
    },

    async updateUser(actor, meta, input) {
      const { userId, email, roles, isActive } = input;
      if (userId === actor.userId) {
        if (isActive === false) throw selfLockout("deactivate themselves");
        if (roles !== undefined && !roles.includes(adminRole)) {
          throw selfLockout(`take the role ${adminRole} from themselves`);
        }
      }
      if (email === undefined && roles === undefined && isActive === undefined) {
        return existing(userId);
      }
      const { after, revoked } = await audited(actor, meta, async (inTx, tx) => {
        const changed = await inTx.update(userId, {
          email,
          roles: roles === undefined ? undefined : [...new Set(roles)],
          isActive,
        });
        if (changed === undefined) return undefined;
        const { before, after } = changed;
        // A deactivated user's sessions end for good: reactivation must not revive them.
        const revoked =
          before.isActive && !after.isActive
            ? await revokeSessions(tx, userId, "user_deactivated")
            : [];
        return {
          result: { after, revoked },
          event: {
            action: "user_update",
            target: `user:${userId}`,
            details: {
              changed: [
                ...(before.email !== after.email ? ["email"] : []),
                ...(before.roles.join("\n") !== after.roles.join("\n") ? ["roles"] : []),
                ...(before.isActive !== after.isActive ? ["is_active"] : []),
              ],
              before: auditView(before),
              after: auditView(after),
              sessions_revoked: revoked.length,
            },
          },
        };
      });
      forget(userId, revoked);
      return after;
    },

    async setUserPassword(actor, meta, input) {
      const user = await existing(input.userId);
      checkPasswordPolicy(input.password, user.username);
      const passwordHash = await passwords.hash(input.password);
      const revoked = await audited(actor, meta, async (inTx, tx) => {
        if (!(await inTx.setPasswordHash(user.id, passwordHash))) return undefined;
        // Whoever held the old password loses the sessions it opened.
        const revoked = await revokeSessions(tx, user.id, "password_set_by_admin");
        return {
          result: revoked,
          event: {
            action: "user_set_password",
            target: `user:${user.id}`,
            details: { changed: ["password"], sessions_revoked: revoked.length },
          },
        };
      });
      forget(user.id, revoked);
    },

    async resetUserMfa(actor, meta, input) {
      await audited(actor, meta, async (inTx, tx) => {
        const user = await inTx.getRecord(input.userId);
        if (user === undefined) return undefined;
        const wasEnabled = await resetMfa(tx, user.id);
        return {
          result: undefined,
          event: {
            action: "user_mfa_reset",
            target: `user:${user.id}`,
            details: { mfa_was_enabled: wasEnabled },
          },
        };
      });
      forget(input.userId, []);
    },

    async deleteUser(actor, meta, input) {
      if (input.userId === actor.userId) throw selfLockout("delete themselves");
      await audited(actor, meta, async (inTx) => {
        const deleted = await inTx.delete(input.userId);
        if (deleted === undefined) return undefined;
        return {
          result: undefined,
          event: {
            action: "user_delete",
            target: `user:${deleted.id}`,
            details: { before: auditView(deleted) },
          },
        };
      });
      forget(input.userId, []);
    },
  };
}

/**
 * Page tokens are opaque to clients: base64url of `{"v":1,"after":…,"filter":…}`, where
 * `after` is the last `lower(username)` of the previous page and `filter` a digest of the
 * filters it was made for. A token used with other filters is refused, because the page
 * it points into belongs to another list.
 */
interface PageToken {
  v: 1;
  after: string;
  filter: string;
}

function filterFingerprint(filter: {
  role: string | undefined;
  isActive: boolean | undefined;
  usernamePrefix: string | undefined;
}): string {
  const canonical = JSON.stringify([
    filter.role ?? null,
    filter.isActive ?? null,
    filter.usernamePrefix?.toLowerCase() ?? null,
  ]);
  return createHash("sha256").update(canonical).digest("base64url").slice(0, 16);
}

const encodePageToken = (after: string, filter: string): string =>
  Buffer.from(JSON.stringify({ v: 1, after, filter } satisfies PageToken)).toString("base64url");

const invalidPageToken = (message: string): DomainError =>
  invalidArgument("INVALID_PAGE_TOKEN", message, { field: "page_token" });

function decodePageToken(token: string, filter: string): string {
  let parsed: Partial<PageToken> | null;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as Partial<PageToken>;
  } catch {
    throw invalidPageToken("page_token is not a token this service issued");
  }
  if (parsed?.v !== 1 || typeof parsed.after !== "string" || typeof parsed.filter !== "string") {
    throw invalidPageToken("page_token is not a token this service issued");
  }
  if (parsed.filter !== filter) {
    throw invalidPageToken("page_token was issued for other filters; start from the first page");
  }
  return parsed.after;
}
