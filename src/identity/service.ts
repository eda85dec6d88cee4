import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { unauthenticated } from "../errors.js";
import { clientAddressKey, type Principal, principalKey, requestIdKey } from "../server/context.js";
import type { Identity, IssuedTokens, RequestMeta } from "./identity.js";

/** Thin Connect handlers: parse → call the domain → map the result. */
export function createIdentityService(identity: Identity): ServiceImpl<typeof IdentityService> {
  return {
    async login(req, ctx) {
      const { username, password, totpCode } = req;
      return tokensReply(await identity.login(username, password, meta(ctx), totpCode));
    },
    async refresh(req, ctx) {
      return tokensReply(await identity.refresh(req.refreshToken, meta(ctx)));
    },
    async logout(_req, ctx) {
      await identity.logout(caller(ctx), meta(ctx));
      return {};
    },
    async logoutAll(_req, ctx) {
      return { sessionsRevoked: await identity.logoutAll(caller(ctx), meta(ctx)) };
    },
    async enrollMfa(_req, ctx) {
      return identity.mfa.enroll(caller(ctx), meta(ctx));
    },
    async activateMfa(req, ctx) {
      return identity.mfa.activate(caller(ctx), req.code, meta(ctx));
    },
    async disableMfa(req, ctx) {
      await identity.mfa.disable(caller(ctx), req.code, meta(ctx));
      return {};
    },
    async validate(_req, ctx) {
      const outcome = await identity.validate(ctx.requestHeader.get("authorization"));
      if (!outcome.valid) return { valid: false, reason: outcome.reason };
      return {
        valid: true,
        userId: outcome.userId,
        username: outcome.username,
        roles: outcome.roles,
        expiresAt: timestampFromDate(outcome.expiresAt),
      };
    },
    async getJwks() {
      return { keys: identity.jwks.map((k) => ({ ...k })) };
    },
  };
}

function tokensReply(issued: IssuedTokens) {
  return {
    token: issued.token,
    tokenType: "Bearer",
    expiresIn: issued.expiresIn,
    refreshToken: issued.refreshToken,
    refreshExpiresIn: issued.refreshExpiresIn,
  };
}

function meta(ctx: HandlerContext): RequestMeta {
  return {
    clientAddress: ctx.values.get(clientAddressKey),
    requestId: ctx.values.get(requestIdKey),
  };
}

/** The authenticated caller, set by the auth interceptor for every non-public method. */
function caller(ctx: HandlerContext): Principal {
  const principal = ctx.values.get(principalKey);
  if (principal === undefined) throw unauthenticated("MISSING", "this call needs an access token");
  return principal;
}

export { IdentityService };
