import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  IdentityService,
  TokenRequestSchema,
} from "../../gen/traitgate/identity/v1/identity_pb.js";
import { invalidArgument, permissionDenied, unauthenticated } from "../errors.js";
import { auditedRequestOf, type Principal, staffPrincipal } from "../server/context.js";
import { noStore } from "../server/no-store.js";
import { createSchemaValidator } from "../server/pattern-match.js";
import { issuerIsBaseUrl, openIdConfiguration } from "./discovery.js";
import type { Identity, IssuedTokens, RequestMeta } from "./identity.js";
import type { ServiceAccounts } from "./service-accounts.js";

/** Thin Connect handlers: parse → call the domain → map the result. */
export function createIdentityService(
  identity: Identity,
  serviceAccounts: Pick<ServiceAccounts, "issueToken">,
  issuer: Parameters<typeof openIdConfiguration>[0],
): ServiceImpl<typeof IdentityService> {
  return {
    async login(req, ctx) {
      noStore(ctx);
      const { username, password, totpCode } = req;
      return tokensReply(await identity.login(username, password, meta(ctx), totpCode));
    },
    async refresh(req, ctx) {
      noStore(ctx);
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
      noStore(ctx);
      return identity.mfa.enroll(caller(ctx), meta(ctx));
    },
    async activateMfa(req, ctx) {
      noStore(ctx);
      return identity.mfa.activate(caller(ctx), req.code, meta(ctx));
    },
    async disableMfa(req, ctx) {
      await identity.mfa.disable(caller(ctx), req.code, meta(ctx));
      return {};
    },
    async token(req, ctx) {
      noStore(ctx);
      const { clientId, clientSecret } = clientCredentials(
        req.clientId,
        req.clientSecret,
        ctx.requestHeader.get("authorization"),
      );
      const issued = await serviceAccounts.issueToken(clientId, clientSecret, meta(ctx));
      return { accessToken: issued.token, tokenType: "Bearer", expiresIn: issued.expiresIn };
    },
    async changePassword(req, ctx) {
      const revoked = await identity.changePassword(
        caller(ctx),
        req.currentPassword,
        req.newPassword,
        meta(ctx),
      );
      return { sessionsRevoked: revoked };
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
        principalType: outcome.kind,
      };
    },
    async getJwks() {
      return { keys: identity.jwks.map((k) => ({ ...k })) };
    },
    async getOpenIdConfiguration(_req, ctx) {
      let requestOrigin: string;
      try {
        requestOrigin = new URL(ctx.url).origin;
      } catch {
        throw invalidArgument("INVALID_HOST", "the request's Host header is not a host name");
      }
      const document = openIdConfiguration(issuer, requestOrigin);
      // With an http(s) JWT_ISSUER the document is the same for everyone: caches may keep it
      // five minutes. Without one its URLs come from the request's Host, which the client
      // chose: a shared cache keyed without the Host must not hand them to someone else.
      ctx.responseHeader.set(
        "cache-control",
        issuerIsBaseUrl(issuer.issuer) ? "public, max-age=300" : "no-store",
      );
      return document;
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
  const request = auditedRequestOf(ctx.values);
  return { ...request, clientAddress: request.origin.clientAddress };
}

/**
 * The authenticated person, set by the auth interceptor for every non-public method.
 * The identity calls that need a caller (logout, MFA, password) are for people:
 * service accounts have no session, MFA or password.
 */
function caller(ctx: HandlerContext): Principal {
  const principal = staffPrincipal(ctx.values);
  if (principal.kind !== "user") {
    throw permissionDenied("USER_TOKEN_REQUIRED", "this call is for users, not service accounts");
  }
  return principal;
}

/**
 * Client credentials from the body, or from HTTP Basic (RFC 6749 §2.3.1: both parts
 * form-urlencoded) when the body has none. Both at once are refused.
 */
function clientCredentials(
  bodyId: string,
  bodySecret: string,
  authorization: string | null,
): { clientId: string; clientSecret: string } {
  const basic =
    authorization === null ? null : /^Basic[ \t]+([A-Za-z0-9+/]+=*)$/i.exec(authorization);
  if (basic === null) {
    if (bodyId === "") {
      throw invalidArgument("MISSING_CLIENT_ID", "client_id is required", { field: "client_id" });
    }
    return { clientId: bodyId, clientSecret: bodySecret };
  }
  if (bodyId !== "" || bodySecret !== "") {
    throw invalidArgument(
      "AMBIGUOUS_CLIENT_CREDENTIALS",
      "send the client credentials either in the body or as HTTP Basic, not both",
      { field: "client_id" },
    );
  }
  const decoded = Buffer.from(basic[1] ?? "", "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  if (colon < 0) throw unauthenticated("INVALID_CLIENT", "client authentication failed");
  let credentials: { clientId: string; clientSecret: string };
  try {
    credentials = {
      clientId: decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, " ")),
      clientSecret: decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, " ")),
    };
  } catch {
    throw unauthenticated("INVALID_CLIENT", "client authentication failed");
  }
  // The body's fields have passed their proto rules before the handler; Basic credentials are
  // held to the same rules (the request message's, so that they cannot drift apart).
  const checked = basicValidator.validate(
    TokenRequestSchema,
    create(TokenRequestSchema, { grantType: "client_credentials", ...credentials }),
  );
  if (checked.kind !== "valid") {
    const first = checked.violations?.[0]?.field[0];
    const field = first?.kind === "field" ? first.name : "authorization";
    throw invalidArgument(
      "INVALID_FIELD",
      `${field} (from HTTP Basic): ${checked.violations?.[0]?.message ?? "invalid"}`,
      { field },
    );
  }
  return credentials;
}

const basicValidator = createSchemaValidator();

export { IdentityService };
