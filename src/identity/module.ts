import type { AuditWriter } from "../audit/index.js";
import type { JwtConfig } from "../config.js";
import { createSecretBox, type DataKeys } from "../crypto/secret-box.js";
import type { Logger } from "../log.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, publicMethod } from "../server/interceptors.js";
import type { Database, Queryable } from "../storage/index.js";
import { createIdentity, type Identity, type IdentitySettings } from "./identity.js";
import { createMfa } from "./mfa.js";
import { createOAuthTokenFormRoute } from "./oauth-token-form.js";
import { createPasswordHasher, type PasswordCost, type PasswordHasher } from "./passwords.js";
import { createIdentityService, IdentityService } from "./service.js";
import { createServiceAccountStore } from "./service-account-store.js";
import { createServiceAccounts, type ServiceAccounts } from "./service-accounts.js";
import { createServiceAccountAdminModule } from "./service-accounts-service.js";
import { createSessionRevoker, createSessionStore } from "./session-store.js";
import { createLoginThrottle, defaultThrottlePolicy, type ThrottlePolicy } from "./throttle.js";
import { createPostgresThrottleStore } from "./throttle-postgres.js";
import { type Clock, createTokenService, systemClock } from "./tokens.js";
import { createUserManagement, type UserManagement } from "./user-management.js";
import { createUserStore } from "./user-store.js";

export interface IdentityModuleDeps {
  db: Database;
  jwt: JwtConfig;
  log: Logger;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  mfaRequired: boolean;
  /**
   * Live values of `auth.mfa_required` and `auth.token_ttl_seconds` (the settings area);
   * default: MFA_REQUIRED and TOKEN_TTL_SECONDS, fixed.
   */
  live?: IdentitySettings;
  /** Keys that seal MFA secrets at rest. */
  dataKeys: DataKeys;
  clock?: Clock;
  throttlePolicy?: ThrottlePolicy;
  /** New password hashes' cost (default argon2Options); tests pass a cheaper one. */
  passwordCost?: PasswordCost;
  /** Is a service account name taken by a plugin id (both are gateway callers)? */
  callerNameTaken?: (name: string) => Promise<boolean>;
  /**
   * Told of a deleted service account's name in the deletion's transaction: its allowlist
   * entries go too, in that transaction. What it returns is called once the deletion committed.
   */
  serviceAccountDeleted?: (tx: Queryable, name: string) => Promise<(() => void) | undefined>;
}

/** How each method of IdentityService is protected (also read by the OpenAPI generator). */
export const identityAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>([
  [`${IdentityService.typeName}/Login`, publicMethod],
  // The refresh token is the credential.
  [`${IdentityService.typeName}/Refresh`, publicMethod],
  // The client credentials are the credential.
  [`${IdentityService.typeName}/Token`, publicMethod],
  // With MFA_REQUIRED, a user without MFA holds an enrolment-only token: it is good for these.
  [`${IdentityService.typeName}/EnrollMfa`, { public: false, roles: [], allowMfaEnrollment: true }],
  [
    `${IdentityService.typeName}/ActivateMfa`,
    { public: false, roles: [], allowMfaEnrollment: true },
  ],
  // Validate reports on the token it is given instead of requiring one.
  [`${IdentityService.typeName}/Validate`, { public: true, readsBearer: true }],
  [`${IdentityService.typeName}/GetJwks`, publicMethod],
  [`${IdentityService.typeName}/GetOpenIdConfiguration`, publicMethod],
]);

/** The identity domain with the operator's user changes (command line, demo mode). */
export type IdentityArea = Identity & UserManagement;

export interface IdentityModule {
  identity: IdentityArea;
  serviceAccounts: ServiceAccounts;
  /** IdentityService. */
  module: ServiceModule;
  /** ServiceAccountAdminService. */
  serviceAccountAdmin: ServiceModule;
  passwords: PasswordHasher;
}

/** Wires the identity area: stores, hasher, token keys, domain and Connect services. */
export async function createIdentityModule(deps: IdentityModuleDeps): Promise<IdentityModule> {
  const clock = deps.clock ?? systemClock;
  const passwords = await createPasswordHasher(
    deps.passwordCost ? { cost: deps.passwordCost } : {},
  );
  const tokens = await createTokenService(deps.jwt, clock);
  const log = deps.log.child({ area: "identity" });
  // One throttle for logins and token requests: an address failing at either is counted once.
  // On PostgreSQL its counters are in the database, shared by every process; on PGlite (one
  // process) in memory.
  const throttlePolicy = deps.throttlePolicy ?? defaultThrottlePolicy;
  const throttle = createLoginThrottle(clock, throttlePolicy, {
    log,
    ...(deps.db.kind === "postgres"
      ? {
          store: createPostgresThrottleStore({
            db: deps.db,
            windowMs: throttlePolicy.windowMs,
            log,
          }),
        }
      : {}),
  });
  const serviceAccountStore = createServiceAccountStore(deps.db);
  const domain = createIdentity({
    users: createUserStore(deps.db),
    commitPasswordChange: ({ userId, passwordHash, keepSessionId, eventFor }) =>
      deps.db.transaction(async (tx) => {
        await createUserStore(tx).setPasswordHash(userId, passwordHash);
        const revoked = await createSessionRevoker(tx).revokeAll(
          userId,
          "password_change",
          keepSessionId,
        );
        await deps.audit.writeIn(tx, eventFor(revoked.length));
        return revoked;
      }),
    serviceAccounts: serviceAccountStore,
    passwords,
    tokens,
    clock,
    log,
    throttle,
    sessions: createSessionStore(deps.db, {
      maxLifetimeSeconds: deps.jwt.sessionMaxLifetimeSeconds,
    }),
    mfa: createMfa({
      db: deps.db,
      box: createSecretBox(deps.dataKeys),
      clock,
      audit: deps.audit,
      issuer: deps.jwt.issuer,
    }),
    audit: deps.audit,
    refreshTtlSeconds: deps.jwt.refreshTtlSeconds,
    live: deps.live ?? {
      mfaRequired: () => deps.mfaRequired,
      tokenTtlSeconds: () => deps.jwt.ttlSeconds,
    },
  });
  const identity: IdentityArea = {
    ...domain,
    ...createUserManagement({
      db: deps.db,
      passwords,
      audit: deps.audit,
      forget: (userId, sessionIds) => {
        domain.forgetUser(userId);
        domain.forgetSessions(sessionIds);
      },
      revokeSessions: (tx, userId, reason) => domain.revokeUserSessions(tx, userId, reason),
    }),
  };
  const serviceAccounts = createServiceAccounts({
    db: deps.db,
    tokens,
    clock,
    throttle,
    audit: deps.audit,
    log,
    tokenTtlSeconds: deps.jwt.serviceTtlSeconds,
    ...(deps.callerNameTaken ? { callerNameTaken: deps.callerNameTaken } : {}),
    ...(deps.serviceAccountDeleted ? { onDeleted: deps.serviceAccountDeleted } : {}),
    forget: (id) => identity.forgetServiceAccount(id),
  });
  const service = createIdentityService(identity, serviceAccounts, deps.jwt);
  return {
    identity,
    serviceAccounts,
    passwords,
    serviceAccountAdmin: createServiceAccountAdminModule(serviceAccounts),
    module: {
      services: [IdentityService],
      register: (router) => router.service(IdentityService, service),
      authRules: identityAuthRules,
      // The standard form-encoded client-credentials request on /auth/token.
      httpRoutes: [createOAuthTokenFormRoute()],
    },
  };
}
