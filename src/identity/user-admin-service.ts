import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { type User, UserAdminService } from "../../gen/traitgate/identity/v1/user_admin_pb.js";
import type { AuditWriter } from "../audit/index.js";
import type { ServiceModule } from "../server/app.js";
import { auditedRequestOf, staffPrincipal } from "../server/context.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Queryable, Session } from "../storage/index.js";
import type { PasswordHasher } from "./passwords.js";
import {
  type AdminActor,
  type AdminRequestMeta,
  adminRole,
  createUserAdmin,
  type UserAdmin,
} from "./user-admin.js";
import type { UserRecord } from "./user-store.js";

/** Thin Connect handlers for user administration: parse → call the domain → map the result. */
export function createUserAdminService(admin: UserAdmin): ServiceImpl<typeof UserAdminService> {
  return {
    async createUser(req, ctx) {
      const user = await admin.createUser(actor(ctx), meta(ctx), {
        username: req.username,
        email: req.email,
        password: req.password,
        roles: req.roles,
      });
      return { user: toMessage(user) };
    },
    async listUsers(req, ctx) {
      const list = await admin.listUsers(actor(ctx), meta(ctx), {
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        role: req.role,
        isActive: req.active,
        usernamePrefix: req.q,
      });
      return { users: list.users.map(toMessage), nextPageToken: list.nextPageToken };
    },
    async getUser(req, ctx) {
      return { user: toMessage(await admin.getUser(actor(ctx), meta(ctx), req)) };
    },
    async updateUser(req, ctx) {
      const user = await admin.updateUser(actor(ctx), meta(ctx), {
        userId: req.userId,
        email: req.email,
        roles: req.roles?.values,
        isActive: req.isActive,
      });
      return { user: toMessage(user) };
    },
    async setUserPassword(req, ctx) {
      await admin.setUserPassword(actor(ctx), meta(ctx), req);
      return {};
    },
    async resetUserMfa(req, ctx) {
      await admin.resetUserMfa(actor(ctx), meta(ctx), req);
      return {};
    },
    async deleteUser(req, ctx) {
      await admin.deleteUser(actor(ctx), meta(ctx), req);
      return {};
    },
  };
}

function toMessage(user: UserRecord): Omit<User, "$typeName"> {
  return {
    userId: user.id,
    username: user.username,
    email: user.email,
    roles: user.roles,
    isActive: user.isActive,
    mfaEnabled: user.mfaEnabled,
    createdAt: timestampFromDate(user.createdAt),
    updatedAt: timestampFromDate(user.updatedAt),
  };
}

/** The authenticated administrator, set by the auth interceptor. */
function actor(ctx: HandlerContext): AdminActor {
  const principal = staffPrincipal(ctx.values);
  return { userId: principal.userId, kind: principal.kind };
}

const meta = (ctx: HandlerContext): AdminRequestMeta => auditedRequestOf(ctx.values);

export interface UserAdminModuleDeps {
  db: Queryable & Pick<Session, "transaction">;
  audit: Pick<AuditWriter, "writeIn">;
  passwords: Pick<PasswordHasher, "hash">;
  /**
   * Drops the identity area's cached state of a user (active flag, roles) and of the
   * sessions a change revoked, once the change committed.
   */
  forget: (userId: string, sessionIds: readonly string[]) => void;
  /** Revokes a user's sessions in the change's transaction (deactivation, password set). */
  revokeSessions: (tx: Queryable, userId: string, reason: string) => Promise<string[]>;
  /** Resets a user's MFA in the change's transaction. */
  resetMfa: (tx: Queryable, userId: string) => Promise<boolean>;
}

/** The methods that only read; the others change accounts. */
const readMethods = new Set(["ListUsers", "GetUser"]);

const userAdminRead = requireAuth({ roles: [adminRole], apiKeyScopes: ["users:read"] });
const userAdminWrite = requireAuth({ roles: [adminRole], apiKeyScopes: ["users:write"] });

/** How each method of UserAdminService is protected (also read by the OpenAPI generator). */
export const userAdminAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>(
  UserAdminService.methods.map((m) => [
    `${UserAdminService.typeName}/${m.name}`,
    readMethods.has(m.name) ? userAdminRead : userAdminWrite,
  ]),
);

/**
 * Wires user administration: every method needs the role `admin` and an API key with the
 * scope `users:read` (reads) or `users:write` (changes), like every administrative API.
 */
export function createUserAdminModule(deps: UserAdminModuleDeps): ServiceModule {
  const admin = createUserAdmin({
    db: deps.db,
    passwords: deps.passwords,
    audit: deps.audit,
    forget: deps.forget,
    revokeSessions: deps.revokeSessions,
    resetMfa: deps.resetMfa,
  });
  return {
    services: [UserAdminService],
    register: (router) => router.service(UserAdminService, createUserAdminService(admin)),
    authRules: userAdminAuthRules,
  };
}

export { UserAdminService };
