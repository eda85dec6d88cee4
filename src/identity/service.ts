import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { clientAddressKey } from "../server/context.js";
import type { Identity } from "./identity.js";

/** Thin Connect handlers: parse → call the domain → map the result. */
export function createIdentityService(identity: Identity): ServiceImpl<typeof IdentityService> {
  return {
    async login(req, ctx) {
      const client = ctx.values.get(clientAddressKey);
      const issued = await identity.login(req.username, req.password, client);
      return { token: issued.token, tokenType: "Bearer", expiresIn: issued.expiresIn };
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

export { IdentityService };
