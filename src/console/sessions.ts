import { createHash, randomBytes } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { SecretBox } from "../crypto/secret-box.js";
import type { Logger } from "../log.js";
import type {
  ConsoleSessionPatch,
  ConsoleSessionRow,
  ConsoleSessionStore,
  ConsoleStage,
} from "./session-store.js";

/** What a console session keeps sealed: the tokens and, once given, the API key. */
export interface SessionSecrets {
  access: string;
  /** Empty for an enrolment-only token (no refresh). */
  refresh: string;
  /** Milliseconds since the epoch. */
  accessExpiresAt: number;
  apiKey?: string;
}

export interface ConsoleSession extends ConsoleSessionRow {
  secrets: SessionSecrets;
}

export interface NewConsoleSession {
  stage: ConsoleStage;
  userId: string;
  username: string;
  roles: string[];
  mfa: boolean;
  secrets: SessionSecrets;
  clientAddress: string;
}

/** Refreshes an access token: new secrets, or throws when the session cannot go on. */
export type TokenRefresher = (
  refreshToken: string,
  clientAddress: string,
) => Promise<Pick<SessionSecrets, "access" | "refresh" | "accessExpiresAt">>;

export interface ConsoleSessionsDeps {
  store: ConsoleSessionStore;
  box: SecretBox;
  log: Logger;
  idleTimeoutSeconds: number;
  refresh: TokenRefresher;
  now?: () => number;
}

/** An access token this close to its expiry is refreshed before use. */
const refreshAheadMs = 60_000;
/** last_seen_at is written at most this often per session. */
const touchEveryMs = 15_000;
const leaseMs = 10_000;

/** The session's row is gone (signed out, idle, ended by another request). */
export class SessionGone extends Error {
  override readonly name = "SessionGone";
  constructor() {
    super("console session ended");
  }
}

/**
 * Does this failure end the console session? Yes when the session is gone or the identity
 * service refuses its login (revoked, expired for good, user deactivated); not for a failure
 * to answer (database or audit unavailable): the user tries again with the same session.
 */
export function endsSession(err: unknown): boolean {
  return (
    err instanceof SessionGone || (err instanceof ConnectError && err.code === Code.Unauthenticated)
  );
}

export const sealContext = (idHash: string) => `console_sessions.sealed:${idHash}`;
export const hashSessionId = (id: string) => createHash("sha256").update(id).digest("hex");
const cookieValuePattern = /^[A-Za-z0-9_-]{43}$/;

/**
 * Console sessions: the random id the browser holds, the row it stands for, and the tokens
 * kept fresh behind it. Nothing here speaks HTTP.
 */
export function createConsoleSessions(deps: ConsoleSessionsDeps) {
  const { store, box, log } = deps;
  const now = deps.now ?? Date.now;
  const idleMs = deps.idleTimeoutSeconds * 1000;
  const seal = (idHash: string, s: SessionSecrets) =>
    box.seal(JSON.stringify(s), sealContext(idHash));
  const open = (row: ConsoleSessionRow): SessionSecrets =>
    JSON.parse(box.openString(row.sealed, sealContext(row.idHash))) as SessionSecrets;
  /** One refresh per session at a time in this process. */
  const refreshing = new Map<string, Promise<SessionSecrets>>();

  async function refreshNow(session: ConsoleSession): Promise<SessionSecrets> {
    const at = now();
    if (!(await store.takeRefreshLease(session.idHash, new Date(at), new Date(at + leaseMs)))) {
      // Another process is refreshing: use the token while it lasts, else wait for theirs.
      if (session.secrets.accessExpiresAt > at + 5_000) return session.secrets;
      return waitForOthers(session);
    }
    // The row as it is now: another request (here or on another replica) may have refreshed
    // since this one read it, and its refresh token is already used up.
    const row = await store.find(session.idHash);
    if (row === undefined) throw new SessionGone();
    const current = open(row);
    if (current.access !== session.secrets.access && current.accessExpiresAt > at + 5_000) {
      await store.saveRefreshed(session.idHash, row.sealed);
      return current;
    }
    let fresh: Awaited<ReturnType<TokenRefresher>>;
    try {
      fresh = await deps.refresh(current.refresh, session.clientAddress);
    } catch (err) {
      await store.releaseRefreshLease(session.idHash).catch(() => undefined);
      throw err;
    }
    const secrets = { ...current, ...fresh };
    await store.saveRefreshed(session.idHash, seal(session.idHash, secrets));
    return secrets;
  }

  async function waitForOthers(session: ConsoleSession): Promise<SessionSecrets> {
    const deadline = now() + leaseMs;
    while (now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      const row = await store.find(session.idHash);
      if (row === undefined) throw new SessionGone();
      const secrets = open(row);
      if (secrets.access !== session.secrets.access) return secrets;
    }
    throw new Error("console session refresh did not finish");
  }

  return {
    idleTimeoutSeconds: deps.idleTimeoutSeconds,

    /** Stores a new session; returns the value of its cookie. */
    async create(s: NewConsoleSession): Promise<string> {
      const id = randomBytes(32).toString("base64url");
      const idHash = hashSessionId(id);
      const at = new Date(now());
      // Idle sessions of everyone go at each sign-in: the table does not grow for ever.
      await store.deleteIdle(new Date(at.getTime() - idleMs));
      await store.insert({
        idHash,
        stage: s.stage,
        userId: s.userId,
        username: s.username,
        roles: s.roles,
        mfa: s.mfa,
        sealed: seal(idHash, s.secrets),
        apiKeyId: null,
        apiKeyScopes: [],
        features: [],
        policyVersion: "",
        clientAddress: s.clientAddress,
        createdAt: at,
        lastSeenAt: at,
      });
      return id;
    },

    /**
     * The session the cookie stands for, if it exists and has not been idle too long (an
     * idle one is deleted). Counts as activity.
     */
    async load(cookieValue: string | undefined): Promise<ConsoleSession | undefined> {
      if (cookieValue === undefined || !cookieValuePattern.test(cookieValue)) return undefined;
      const row = await store.find(hashSessionId(cookieValue));
      if (row === undefined) return undefined;
      const at = now();
      if (at - row.lastSeenAt.getTime() > idleMs) {
        await store.delete(row.idHash);
        log.info({ event: "console_session_idle", user_id: row.userId }, "console session idle");
        return undefined;
      }
      if (at - row.lastSeenAt.getTime() > touchEveryMs) {
        await store.touch(row.idHash, new Date(at));
      }
      return { ...row, secrets: open(row) };
    },

    /** The session's secrets with an access token good for a while (refreshed if needed). */
    async fresh(session: ConsoleSession): Promise<SessionSecrets> {
      if (session.secrets.accessExpiresAt - now() > refreshAheadMs) return session.secrets;
      if (session.secrets.refresh === "") return session.secrets;
      let pending = refreshing.get(session.idHash);
      if (pending === undefined) {
        pending = refreshNow(session).finally(() => refreshing.delete(session.idHash));
        refreshing.set(session.idHash, pending);
      }
      return pending;
    },

    async update(
      session: ConsoleSession,
      patch: ConsoleSessionPatch & { secrets?: SessionSecrets },
    ): Promise<void> {
      const { secrets, ...rest } = patch;
      await store.update(session.idHash, {
        ...rest,
        ...(secrets ? { sealed: seal(session.idHash, secrets) } : {}),
      });
    },

    async end(idHash: string): Promise<boolean> {
      refreshing.delete(idHash);
      return store.delete(idHash);
    },
  };
}

export type ConsoleSessions = ReturnType<typeof createConsoleSessions>;
