import { createHash } from "node:crypto";
import type { AuditEventInput, AuditWriter } from "../audit/index.js";
import { DomainError, invalidArgument } from "../errors.js";
import { checkPasswordPolicy } from "./password-policy.js";
import type { PasswordHasher } from "./passwords.js";
import type { UserAdminStore, UserChanges, UserRecord, UserStore } from "./user-store.js";

/**
 * User administration: what an administrator may do to other users' accounts. Every
 * change is committed to the audit log before the caller gets an answer (fail closed);
 * the role check is the auth interceptor's (src/identity/user-admin-service.ts).
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
  users: Pick<UserStore, "create" | "setPasswordHash"> & UserAdminStore;
  passwords: Pick<PasswordHasher, "hash">;
  audit: Pick<AuditWriter, "write">;
  /** Called after a change to a user, so that cached user state is dropped at once. */
  forget: (userId: string) => void;
  /** Revokes the user's sessions (on deactivation and on a password set by an admin). */
  revokeSessions: (userId: string, reason: string) => Promise<number>;
  /** Turns a user's MFA off and deletes its secret and recovery codes; was it on? */
  resetMfa: (userId: string) => Promise<boolean>;
}

const userNotFound = (): DomainError =>
  new DomainError("not_found", "USER_NOT_FOUND", "no user has this id", { field: "user_id" });

const selfLockout = (what: string): DomainError =>
  new DomainError("failed_precondition", "SELF_LOCKOUT", `administrators cannot ${what}`, {
    field: "user_id",
  });

/** What the audit log keeps of a user: no password, no email address (docs/audit.md). */
const auditView = (user: UserRecord) => ({ roles: user.roles, is_active: user.isActive });

export function createUserAdmin(deps: UserAdminDeps): UserAdmin {
  const { users, passwords, audit, forget, revokeSessions, resetMfa } = deps;

  /** A successful change, committed to the audit log before the answer is sent. */
  const record = (
    actor: AdminActor,
    meta: AdminRequestMeta,
    event: Pick<AuditEventInput, "action" | "target" | "details">,
  ) =>
    audit.write({
      ...event,
      ...auditActor(actor),
      outcome: "success",
      requestId: meta.requestId,
    });

  async function existing(userId: string): Promise<UserRecord> {
    const user = await users.getRecord(userId);
    if (user === undefined) throw userNotFound();
    return user;
  }

  return {
    async createUser(actor, meta, input) {
      checkPasswordPolicy(input.password, input.username);
      const created = await users.create({
        username: input.username,
        email: input.email,
        passwordHash: await passwords.hash(input.password),
        roles: [...new Set(input.roles)],
      });
      const user = await existing(created.id);
      await record(actor, meta, {
        action: "user_create",
        target: `user:${user.id}`,
        details: { after: auditView(user) },
      });
      return user;
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
      const changed = await users.update(userId, {
        email,
        roles: roles === undefined ? undefined : [...new Set(roles)],
        isActive,
      });
      if (changed === undefined) throw userNotFound();
      forget(userId);
      const { before, after } = changed;
      // A deactivated user's sessions end for good: reactivation must not revive them.
      const sessionsRevoked =
        before.isActive && !after.isActive ? await revokeSessions(userId, "user_deactivated") : 0;
      await record(actor, meta, {
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
          sessions_revoked: sessionsRevoked,
        },
      });
      return after;
    },

    async setUserPassword(actor, meta, input) {
      const user = await existing(input.userId);
      checkPasswordPolicy(input.password, user.username);
      const passwordHash = await passwords.hash(input.password);
      if (!(await users.setPasswordHash(user.id, passwordHash))) throw userNotFound();
      // Whoever held the old password loses the sessions it opened.
      const sessionsRevoked = await revokeSessions(user.id, "password_set_by_admin");
      await record(actor, meta, {
        action: "user_set_password",
        target: `user:${user.id}`,
        details: { changed: ["password"], sessions_revoked: sessionsRevoked },
      });
    },

    async resetUserMfa(actor, meta, input) {
      const user = await existing(input.userId);
      const wasEnabled = await resetMfa(user.id);
      forget(user.id);
      await record(actor, meta, {
        action: "user_mfa_reset",
        target: `user:${user.id}`,
        details: { mfa_was_enabled: wasEnabled },
      });
    },

    async deleteUser(actor, meta, input) {
      if (input.userId === actor.userId) throw selfLockout("delete themselves");
      const deleted = await users.delete(input.userId);
      if (deleted === undefined) throw userNotFound();
      forget(deleted.id);
      await record(actor, meta, {
        action: "user_delete",
        target: `user:${deleted.id}`,
        details: { before: auditView(deleted) },
      });
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
