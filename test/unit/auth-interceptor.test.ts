import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { TranscodingTestService } from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { unauthenticated, unavailable } from "../../src/errors.js";
import { silentLogger } from "../../src/log.js";
import { principalKey } from "../../src/server/context.js";
import {
  type ApiKeyVerifier,
  type AuthInterceptorOptions,
  type AuthRule,
  createAuthInterceptor,
  createRequestInterceptor,
  type RefusedCall,
  requireAuth,
} from "../../src/server/interceptors.js";

/**
 * The auth interceptor's order of checks for administrative methods: a valid
 * token, then a valid API key (401), then the role (403 ROLE), then the key's
 * scopes (403 API_KEY_SCOPE); every refusal is reported before it is answered.
 */

const svc = TranscodingTestService.typeName;
const callers = {
  admin: { kind: "user", userId: "u1", username: "root", roles: ["admin"], sessionId: "s1" },
  viewer: { kind: "user", userId: "u2", username: "vera", roles: ["viewer"], sessionId: "s2" },
} as const;
const keys: Record<string, { id: string; scopes: string[] }> = {
  "key-read": { id: "k1", scopes: ["settings:read"] },
  "key-write": { id: "k2", scopes: ["settings:read", "settings:write"] },
};
const apiKeys: ApiKeyVerifier = {
  async verify(key) {
    const found = keys[key];
    if (!found) throw unauthenticated("API_KEY_INVALID", "unknown API key");
    return found;
  },
};

function client(options: Partial<AuthInterceptorOptions> = {}, withKeys = true) {
  const rules = new Map<string, AuthRule>([
    [`${svc}/WhoAmI`, requireAuth({ roles: ["admin"], apiKeyScopes: ["settings:write"] })],
  ]);
  const transport = createRouterTransport(
    (router) =>
      router.service(TranscodingTestService, {
        async whoAmI(_req, ctx) {
          const p = ctx.values.get(principalKey);
          return { client: `${p?.username}/${p?.apiKey?.id ?? "-"}` };
        },
      }),
    {
      router: {
        interceptors: [
          createRequestInterceptor(silentLogger),
          createAuthInterceptor({
            authenticator: {
              async authenticate(authorization) {
                const who = (authorization ?? "").replace(/^Bearer /, "");
                const caller = callers[who as keyof typeof callers];
                if (!caller) throw unauthenticated("MISSING", "no valid token");
                return caller;
              },
            },
            rules,
            ...(withKeys ? { apiKeys } : {}),
            ...options,
          }),
        ],
      },
    },
  );
  return createClient(TranscodingTestService, transport);
}

async function refusal(promise: Promise<unknown>): Promise<{ code: Code; reason: string }> {
  const err = await promise.then(
    () => expect.fail("expected the call to be refused"),
    (e: unknown) => ConnectError.from(e),
  );
  return { code: err.code, reason: err.findDetails(ErrorInfoSchema)[0]?.reason ?? "" };
}

const as = (token: string, key?: string) => ({
  headers: { authorization: `Bearer ${token}`, ...(key ? { "x-api-key": key } : {}) },
});

describe("token and API key", () => {
  it("lets an admin with a key holding the scope through, with the key in the principal", async () => {
    const res = await client().whoAmI({}, as("admin", "key-write"));
    expect(res.client).toBe("root/k2");
  });

  it("refuses, in order: no token, no key, unknown key, wrong role, missing scope", async () => {
    const c = client();
    expect(await refusal(c.whoAmI({}, { headers: { "x-api-key": "key-write" } }))).toEqual({
      code: Code.Unauthenticated,
      reason: "MISSING",
    });
    expect(await refusal(c.whoAmI({}, as("admin")))).toEqual({
      code: Code.Unauthenticated,
      reason: "API_KEY_MISSING",
    });
    expect(await refusal(c.whoAmI({}, as("admin", "key-stolen")))).toEqual({
      code: Code.Unauthenticated,
      reason: "API_KEY_INVALID",
    });
    expect(await refusal(c.whoAmI({}, as("viewer", "key-write")))).toEqual({
      code: Code.PermissionDenied,
      reason: "ROLE",
    });
    expect(await refusal(c.whoAmI({}, as("admin", "key-read")))).toEqual({
      code: Code.PermissionDenied,
      reason: "API_KEY_SCOPE",
    });
  });

  it("fails closed when a method asks for a key and the server has no verifier", async () => {
    const c = client({}, false);
    expect((await refusal(c.whoAmI({}, as("admin", "key-write")))).code).toBe(Code.Unauthenticated);
  });
});

describe("refused calls are reported", () => {
  it("reports each refusal with the caller and key known so far", async () => {
    const refused: RefusedCall[] = [];
    const c = client({ onRefused: async (call) => void refused.push(call) });
    await refusal(c.whoAmI({}, as("nobody", "key-write")));
    await refusal(c.whoAmI({}, as("admin", "key-read")));
    await c.whoAmI({}, as("admin", "key-write"));
    expect(refused.map((r) => [r.rpc, r.error.reason, r.caller?.userId, r.apiKeyId])).toEqual([
      [`${svc}/WhoAmI`, "MISSING", undefined, undefined],
      [`${svc}/WhoAmI`, "API_KEY_SCOPE", "u1", "k1"],
    ]);
    expect(refused[0]?.requestId).not.toBe("");
  });

  it("does not report a failure to decide (a key store that is down) as a refusal", async () => {
    const refused: RefusedCall[] = [];
    const c = client({
      apiKeys: {
        async verify() {
          throw unavailable("DATABASE_UNAVAILABLE", "the database does not answer");
        },
      },
      onRefused: async (call) => void refused.push(call),
    });
    expect((await refusal(c.whoAmI({}, as("admin", "key-write")))).code).toBe(Code.Unavailable);
    expect(refused).toEqual([]);
  });

  it("answers with the reporter's error when the refusal cannot be recorded", async () => {
    const c = client({
      onRefused: async () => {
        throw new ConnectError("audit down", Code.Unavailable);
      },
    });
    expect((await refusal(c.whoAmI({}, as("viewer", "key-write")))).code).toBe(Code.Unavailable);
  });
});
