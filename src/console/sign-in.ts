import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { RequestOrigin } from "../audit/event.js";
import type { AuditWriter } from "../audit/index.js";
import { DomainError, invalidArgument, unauthenticated } from "../errors.js";
import type { Logger } from "../log.js";
import { reasonOf } from "../server/error-boundary.js";
import type { ApiKeyVerifier } from "../server/interceptors.js";
import { consoleAccess, sessionTraits } from "./access.js";
import type { ConsoleClients } from "./clients.js";
import type { ConsoleSession, ConsoleSessions, SessionSecrets } from "./sessions.js";

export interface SignInDeps {
  sessions: ConsoleSessions;
  clients: (origin: RequestOrigin) => ConsoleClients;
  apiKeys: ApiKeyVerifier;
  audit: Pick<AuditWriter, "write">;
  log: Logger;
  now?: () => number;
}

/** What the browser does next. `cookie` is the new session's id, for the Set-Cookie. */
export type SignInStep =
  | { step: "mfa" }
  | { step: "enrol"; cookie: string; secret: string; otpauthUri: string }
  | { step: "api_key"; cookie: string }
  | { step: "ready"; cookie: string };

interface TokenClaims {
  sub: string;
  username: string;
  roles: string[];
  scope?: string;
}

/** The claims of a token this server has just issued in process (not a check of it). */
function claimsOf(token: string): TokenClaims {
  const payload = token.split(".")[1] ?? "";
  return JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as TokenClaims;
}

const bearer = (secrets: Pick<SessionSecrets, "access">) => ({
  headers: { authorization: `Bearer ${secrets.access}` },
});

/**
 * The console's sign-in: password, then a TOTP code when the account has MFA (or MFA
 * enrolment when MFA_REQUIRED and none is set up), then the API key to act with. Every step
 * calls the identity and policy services' own handlers.
 */
export function createSignIn(deps: SignInDeps) {
  const { sessions, clients, log } = deps;
  const now = deps.now ?? Date.now;

  async function features(
    session: Pick<ConsoleSession, "roles" | "mfa">,
    secrets: SessionSecrets,
    origin: RequestOrigin,
  ) {
    let traits = sessionTraits(session.roles, session.mfa);
    // A role the trait registry does not know is left out (it grants no feature).
    for (let i = 0; i < 16; i++) {
      try {
        const res = await clients(origin).policy.listUiFeatures({ traits }, bearer(secrets));
        return {
          features: res.features.map((f) => f.replace(/^ui_feature:/, "")),
          policyVersion: res.policyVersion,
        };
      } catch (err) {
        const e = ConnectError.from(err);
        const trait = e.findDetails(ErrorInfoSchema)[0]?.metadata.trait;
        if (e.code !== Code.InvalidArgument || trait === undefined || !traits.includes(trait))
          throw err;
        traits = traits.filter((t) => t !== trait);
      }
    }
    throw new Error("too many unknown roles");
  }

  async function audit(
    session: Pick<ConsoleSession, "userId">,
    action: string,
    outcome: "success" | "failure",
    origin: RequestOrigin,
    details: Record<string, unknown> = {},
  ) {
    await deps.audit.write({
      actorType: "user",
      actorId: session.userId,
      action,
      target: `user:${session.userId}`,
      outcome,
      origin,
      details,
    });
  }

  return {
    features,

    /** Username and password, with the TOTP code on the second round for an MFA account. */
    async password(
      input: { username: string; password: string; totpCode: string },
      origin: RequestOrigin,
    ): Promise<SignInStep> {
      if (input.username === "")
        throw invalidArgument("INVALID_FIELD", "enter your username", { field: "username" });
      if (input.password === "")
        throw invalidArgument("INVALID_FIELD", "enter your password", { field: "password" });
      const identity = clients(origin).identity;
      // Without the code first: only an account that asks for one counts as signed in with
      // a second factor (a code sent for an account without MFA would be ignored).
      let mfa = false;
      let tokens: Awaited<ReturnType<typeof identity.login>>;
      try {
        tokens = await identity.login({ username: input.username, password: input.password });
      } catch (err) {
        if (reasonOf(ConnectError.from(err)) !== "MFA_REQUIRED") throw err;
        if (input.totpCode === "") return { step: "mfa" };
        if (!/^[0-9]{6}$|^[A-Za-z0-9-]{8,32}$/.test(input.totpCode)) {
          throw invalidArgument("INVALID_FIELD", "the code is six digits", { field: "totp_code" });
        }
        tokens = await identity.login({ ...input, totpCode: input.totpCode });
        mfa = true;
      }
      const claims = claimsOf(tokens.token);
      const secrets: SessionSecrets = {
        access: tokens.token,
        refresh: tokens.refreshToken,
        accessExpiresAt: now() + tokens.expiresIn * 1000,
      };
      const user = {
        userId: claims.sub,
        username: claims.username,
        roles: claims.roles ?? [],
        mfa,
      };
      if (claims.scope === "mfa_enroll") {
        const cookie = await sessions.create({
          ...user,
          stage: "enrol",
          secrets,
          clientAddress: origin.clientAddress,
        });
        const enrolment = await identity.enrollMfa({}, bearer(secrets));
        return {
          step: "enrol",
          cookie,
          secret: enrolment.secret,
          otpauthUri: enrolment.otpauthUri,
        };
      }
      const { features: f, policyVersion } = await features(user, secrets, origin);
      const access = consoleAccess(f, user.roles);
      const stage = access.kind === "console" ? "api_key" : "active";
      const cookie = await sessions.create({
        ...user,
        stage,
        secrets,
        clientAddress: origin.clientAddress,
      });
      const session = await sessions.load(cookie);
      if (session) await sessions.update(session, { features: f, policyVersion });
      if (stage === "active") {
        await audit(user, "console_sign_in", "success", origin, {
          mfa,
          access: access.kind,
        });
        return { step: "ready", cookie };
      }
      return { step: "api_key", cookie };
    },

    /** MFA enrolment's first code: MFA is on; the recovery codes are answered this once. */
    async activateMfa(
      session: ConsoleSession,
      code: string,
      origin: RequestOrigin,
    ): Promise<{ recoveryCodes: string[] }> {
      if (session.stage !== "enrol")
        throw unauthenticated("CONSOLE_STAGE", "no MFA enrolment in progress");
      if (!/^[0-9]{6}$/.test(code))
        throw invalidArgument("INVALID_FIELD", "the code is six digits", { field: "code" });
      const res = await clients(origin).identity.activateMfa({ code }, bearer(session.secrets));
      // The enrolment-only token is good for nothing else: sign in again, with a code.
      await sessions.end(session.idHash);
      return { recoveryCodes: res.recoveryCodes };
    },

    /** The API key to act with: checked, its scopes kept, and the session made usable. */
    async apiKey(session: ConsoleSession, key: string, origin: RequestOrigin): Promise<void> {
      if (session.stage !== "api_key") throw unauthenticated("CONSOLE_STAGE", "sign in first");
      if (key.trim() === "")
        throw invalidArgument("INVALID_FIELD", "enter an API key", { field: "api_key" });
      let verified: Awaited<ReturnType<ApiKeyVerifier["verify"]>>;
      try {
        verified = await deps.apiKeys.verify(key.trim());
      } catch (err) {
        if (err instanceof DomainError && err.kind === "unauthenticated") {
          await audit(session, "console_sign_in", "failure", origin, {
            cause: "api_key_invalid",
          });
          throw new DomainError("invalid_argument", err.reason, err.message, { field: "api_key" });
        }
        throw err;
      }
      await sessions.update(session, {
        stage: "active",
        secrets: { ...session.secrets, apiKey: key.trim() },
        apiKeyId: verified.id,
        apiKeyScopes: [...verified.scopes],
      });
      await audit(session, "console_sign_in", "success", origin, {
        mfa: session.mfa,
        api_key_id: verified.id,
      });
      log.info({ event: "console_sign_in", user_id: session.userId }, "console sign-in");
    },

    /** Ends the session and its login session; the cookie is useless from now on. */
    async signOut(session: ConsoleSession, origin: RequestOrigin): Promise<void> {
      await sessions.end(session.idHash);
      await clients(origin)
        .identity.logout({}, bearer(session.secrets))
        .catch(() => undefined);
      await audit(session, "console_sign_out", "success", origin);
    },
  };
}

export type SignIn = ReturnType<typeof createSignIn>;
