import type { AuditEventInput, AuditWriter } from "../audit/index.js";
import { invalidArgument } from "../errors.js";
import type { Queryable, Session } from "../storage/index.js";
import { checkPasswordPolicy } from "./password-policy.js";
import type { PasswordHasher } from "./passwords.js";
import { auditActor, auditView } from "./user-admin.js";
import { createUserStore, type User } from "./user-store.js";

/**
 * The operator's user changes (the command line and demo mode): creating users and setting
 * their password or active flag. Like user administration (src/identity/user-admin.ts), each
 * change commits in one transaction with its audit event, here as the system actor, or not
 * at all (503 AUDIT_UNAVAILABLE when the event cannot be written).
 */

export interface NewUserInput {
  username: string;
  email: string;
  password: string;
  roles: readonly string[];
}

/** The request a change belongs to, for the audit trail: the command line's `cli-…` id. */
export interface OperatorRequestMeta {
  /** Default null (no request: a test or benchmark set-up). */
  requestId: string | null;
}

export interface UserManagement {
  createUser(input: NewUserInput, meta?: OperatorRequestMeta): Promise<Omit<User, "passwordHash">>;
  /**
   * Sets a new password for the user with this username and revokes their open sessions;
   * false if there is no such user.
   */
  setPassword(username: string, password: string, meta?: OperatorRequestMeta): Promise<boolean>;
  /** Deactivation revokes the user's open sessions; false if there is no such user. */
  setActive(userId: string, isActive: boolean, meta?: OperatorRequestMeta): Promise<boolean>;
}

export interface UserManagementDeps {
  /** Where users live; each change and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  passwords: Pick<PasswordHasher, "hash">;
  audit: Pick<AuditWriter, "writeIn">;
  /** Called once a change committed, so cached state of the user and sessions is dropped. */
  forget: (userId: string, sessionIds: readonly string[]) => void;
  /** Revokes every open session of the user in the change's transaction; their ids. */
  revokeSessions: (tx: Queryable, userId: string, reason: string) => Promise<string[]>;
}

const usernamePattern = /^[A-Za-z0-9._@-]{3,128}$/;

const systemActor = auditActor({ userId: "", kind: "system" });

const noRequest: OperatorRequestMeta = { requestId: null };

export function createUserManagement(deps: UserManagementDeps): UserManagement {
  const { db, passwords, audit, forget, revokeSessions } = deps;

  /** The change's audit event, written in its transaction (fails closed). */
  const record = (
    tx: Queryable,
    meta: OperatorRequestMeta,
    event: Pick<AuditEventInput, "action" | "target" | "details">,
  ) =>
    audit.writeIn(tx, {
      ...event,
      ...systemActor,
      outcome: "success",
      requestId: meta.requestId,
    });

  return {
    async createUser(input, meta = noRequest) {
      if (!usernamePattern.test(input.username)) {
        throw invalidArgument(
          "INVALID_USERNAME",
          "username must be 3–128 letters, digits or . _ @ -",
          {
            field: "username",
          },
        );
      }
      checkPasswordPolicy(input.password, input.username);
      const passwordHash = await passwords.hash(input.password);
      return db.transaction(async (tx) => {
        const { passwordHash: _hidden, ...user } = await createUserStore(tx).create({
          username: input.username,
          email: input.email,
          passwordHash,
          roles: input.roles,
        });
        await record(tx, meta, {
          action: "user_create",
          target: `user:${user.id}`,
          details: { after: auditView(user) },
        });
        return user;
      });
    },

    async setPassword(username, password, meta = noRequest) {
      checkPasswordPolicy(password, username);
      const user = await createUserStore(db).findByUsername(username);
      if (user === undefined) return false;
      const passwordHash = await passwords.hash(password);
      const revoked = await db.transaction(async (tx) => {
        if (!(await createUserStore(tx).setPasswordHash(user.id, passwordHash))) return undefined;
        // Whoever held the old password loses the sessions it opened.
        const revoked = await revokeSessions(tx, user.id, "password_set_by_operator");
        await record(tx, meta, {
          action: "user_set_password",
          target: `user:${user.id}`,
          details: { changed: ["password"], sessions_revoked: revoked.length },
        });
        return revoked;
      });
      if (revoked === undefined) return false;
      forget(user.id, revoked);
      return true;
    },

    async setActive(userId, isActive, meta = noRequest) {
      const revoked = await db.transaction(async (tx) => {
        const changed = await createUserStore(tx).update(userId, { isActive });
        if (changed === undefined) return undefined;
        const { before, after } = changed;
        // A deactivated user's sessions end for good: reactivation must not revive them.
        const revoked =
          before.isActive && !after.isActive
            ? await revokeSessions(tx, userId, "user_deactivated")
            : [];
        await record(tx, meta, {
          action: "user_update",
          target: `user:${userId}`,
          details: {
            changed: before.isActive !== after.isActive ? ["is_active"] : [],
            before: auditView(before),
            after: auditView(after),
            sessions_revoked: revoked.length,
          },
        });
        return revoked;
      });
      if (revoked === undefined) return false;
      forget(userId, revoked);
      return true;
    },
  };
}
