import { type Timestamp, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  ServiceAccountAdminService,
  type ServiceAccount as ServiceAccountMessage,
} from "../../gen/traitgate/identity/v1/service_accounts_pb.js";
import type { ServiceModule } from "../server/app.js";
import { auditedRequestOf, staffPrincipal } from "../server/context.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import { noStore } from "../server/no-store.js";
import type { ServiceAccount, ServiceAccounts } from "./service-accounts.js";
import { type AdminActor, type AdminRequestMeta, adminRole } from "./user-admin.js";

/** Thin Connect handlers for service-account administration. */
export function createServiceAccountAdminService(
  accounts: ServiceAccounts,
): ServiceImpl<typeof ServiceAccountAdminService> {
  return {
    async createServiceAccount(req, ctx) {
      noStore(ctx);
      const created = await accounts.create(actor(ctx), meta(ctx), {
        name: req.name,
        description: req.description,
        roles: req.roles,
      });
      return { serviceAccount: toMessage(created.account), clientSecret: created.clientSecret };
    },
    async listServiceAccounts(req, ctx) {
      const list = await accounts.list(actor(ctx), meta(ctx), {
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      return { serviceAccounts: list.accounts.map(toMessage), nextPageToken: list.nextPageToken };
    },
    async getServiceAccount(req, ctx) {
      return {
        serviceAccount: toMessage(await accounts.get(actor(ctx), meta(ctx), req.serviceAccountId)),
      };
    },
    async updateServiceAccount(req, ctx) {
      const account = await accounts.update(actor(ctx), meta(ctx), req.serviceAccountId, {
        description: req.description,
        roles: req.roles?.values,
        isActive: req.isActive,
      });
      return { serviceAccount: toMessage(account) };
    },
    async rotateServiceAccountSecret(req, ctx) {
      noStore(ctx);
      const rotated = await accounts.rotateSecret(
        actor(ctx),
        meta(ctx),
        req.serviceAccountId,
        req.graceSeconds,
      );
      return { serviceAccount: toMessage(rotated.account), clientSecret: rotated.clientSecret };
    },
    async deleteServiceAccount(req, ctx) {
      await accounts.delete(actor(ctx), meta(ctx), req.serviceAccountId);
      return {};
    },
  };
}

const optionalTimestamp = (date: Date | null): Timestamp | undefined =>
  date === null ? undefined : timestampFromDate(date);

function toMessage(a: ServiceAccount): Omit<ServiceAccountMessage, "$typeName"> {
  return {
    serviceAccountId: a.id,
    name: a.name,
    description: a.description,
    roles: a.roles,
    isActive: a.isActive,
    createdAt: timestampFromDate(a.createdAt),
    updatedAt: timestampFromDate(a.updatedAt),
    secretIssuedAt: timestampFromDate(a.secretIssuedAt),
    previousSecretExpiresAt: optionalTimestamp(a.previousSecretExpiresAt),
  };
}

function actor(ctx: HandlerContext): AdminActor {
  const principal = staffPrincipal(ctx.values);
  return { userId: principal.userId, kind: principal.kind };
}

const meta = (ctx: HandlerContext): AdminRequestMeta => auditedRequestOf(ctx.values);

/** The methods that only read; the others change accounts. */
const readMethods = new Set(["ListServiceAccounts", "GetServiceAccount"]);

const read = requireAuth({ roles: [adminRole], apiKeyScopes: ["service_accounts:read"] });
const write = requireAuth({ roles: [adminRole], apiKeyScopes: ["service_accounts:write"] });

/** How each method of ServiceAccountAdminService is protected (also read by the OpenAPI generator). */
export const serviceAccountAdminAuthRules: ReadonlyMap<string, AuthRule> = new Map<
  string,
  AuthRule
>(
  ServiceAccountAdminService.methods.map((m) => [
    `${ServiceAccountAdminService.typeName}/${m.name}`,
    readMethods.has(m.name) ? read : write,
  ]),
);

/**
 * Service-account administration: every method needs the role `admin` and an API key with
 * the scope `service_accounts:read` (reads) or `service_accounts:write` (changes).
 */
export function createServiceAccountAdminModule(accounts: ServiceAccounts): ServiceModule {
  return {
    services: [ServiceAccountAdminService],
    register: (router) =>
      router.service(ServiceAccountAdminService, createServiceAccountAdminService(accounts)),
    authRules: serviceAccountAdminAuthRules,
  };
}

export { ServiceAccountAdminService };
