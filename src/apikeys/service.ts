import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type ApiKey,
  type ApiKeyService,
  ApiKeyStatus,
} from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import { auditedRequestOf, staffPrincipal } from "../server/context.js";
import { noStore } from "../server/no-store.js";
import type { ApiKeyRecord, ApiKeyStatusFilter } from "./api-key-store.js";
import type {
  ApiKeyActor,
  ApiKeyRequestMeta,
  ApiKeys,
  ApiKeyStatus as Status,
} from "./api-keys.js";
import { keyType } from "./key-format.js";

/** Thin Connect handlers for API key management: parse → call the domain → map the result. */
export function createApiKeyService(apiKeys: ApiKeys): ServiceImpl<typeof ApiKeyService> {
  const toMessage = (key: ApiKeyRecord): Omit<ApiKey, "$typeName"> => ({
    keyId: key.id,
    name: key.name,
    prefix: `${keyType}_${key.prefix}`,
    scopes: key.scopes,
    createdBy: key.createdBy ?? "",
    createdAt: timestampFromDate(key.createdAt),
    ...(key.expiresAt ? { expiresAt: timestampFromDate(key.expiresAt) } : {}),
    ...(key.revokedAt ? { revokedAt: timestampFromDate(key.revokedAt) } : {}),
    revokedBy: key.revokedBy ?? "",
    ...(key.lastUsedAt ? { lastUsedAt: timestampFromDate(key.lastUsedAt) } : {}),
    status: statusMessage[apiKeys.statusOf(key)],
  });

  return {
    async createApiKey(req, ctx) {
      noStore(ctx);
      const { record, key } = await apiKeys.create(actor(ctx), meta(ctx), {
        name: req.name,
        scopes: req.scopes,
        expiresAt: req.expiresAt ? timestampDate(req.expiresAt) : undefined,
      });
      return { apiKey: toMessage(record), key };
    },
    async listApiKeys(req, ctx) {
      const list = await apiKeys.list(actor(ctx), meta(ctx), {
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        status: statusFilter[req.status],
      });
      return { apiKeys: list.keys.map(toMessage), nextPageToken: list.nextPageToken };
    },
    async getApiKey(req, ctx) {
      return { apiKey: toMessage(await apiKeys.get(actor(ctx), meta(ctx), { keyId: req.keyId })) };
    },
    async revokeApiKey(req, ctx) {
      const key = await apiKeys.revoke(actor(ctx), meta(ctx), { keyId: req.keyId });
      return { apiKey: toMessage(key) };
    },
  };
}

const statusMessage: Record<Status, ApiKeyStatus> = {
  active: ApiKeyStatus.ACTIVE,
  revoked: ApiKeyStatus.REVOKED,
  expired: ApiKeyStatus.EXPIRED,
};

const statusFilter: Record<ApiKeyStatus, ApiKeyStatusFilter> = {
  [ApiKeyStatus.UNSPECIFIED]: undefined,
  [ApiKeyStatus.ACTIVE]: "active",
  [ApiKeyStatus.REVOKED]: "revoked",
  [ApiKeyStatus.EXPIRED]: "expired",
};

/** The authenticated caller and the key they presented, set by the auth interceptor. */
function actor(ctx: HandlerContext): ApiKeyActor {
  const principal = staffPrincipal(ctx.values);
  return { type: principal.kind, id: principal.userId, apiKey: principal.apiKey };
}

const meta = (ctx: HandlerContext): ApiKeyRequestMeta => auditedRequestOf(ctx.values);
