import { createHash, randomBytes } from "node:crypto";
import { generateSecret, generateURI, verifySync } from "otplib";
import type { AuditWriter } from "../audit/index.js";
import type { SecretBox } from "../crypto/secret-box.js";
import { DomainError } from "../errors.js";
import type { MfaStore } from "./mfa-store.js";
import type { Clock } from "./tokens.js";

/**
 * TOTP multi-factor authentication (RFC 6238: SHA-1, 6 digits, 30 s steps,
 * one step of tolerance either way). Enrol → activate with a first code →
 * on. A code is accepted once: the step it belongs to is recorded atomically,
 * and that step or an older one is refused afterwards. Recovery codes are
 * single-use and stored hashed; the TOTP secret is sealed at rest.
 */

export interface MfaCaller {
  userId: string;
  username: string;
}

export interface MfaMeta {
  requestId: string;
}

export interface Mfa {
  enroll(caller: MfaCaller, meta: MfaMeta): Promise<{ secret: string; otpauthUri: string }>;
  activate(caller: MfaCaller, code: string, meta: MfaMeta): Promise<{ recoveryCodes: string[] }>;
  disable(caller: MfaCaller, code: string, meta: MfaMeta): Promise<void>;
  /** For login: a current TOTP code or an unused recovery code of the user. */
  check(userId: string, code: string): Promise<boolean>;
  /** An administrator's reset: MFA off, secret and recovery codes deleted. Was it on? */
  reset(userId: string): Promise<boolean>;
}

export interface MfaDeps {
  store: MfaStore;
  box: SecretBox;
  clock: Clock;
  audit: Pick<AuditWriter, "write">;
  /** Shown in authenticator apps. */
  issuer: string;
}

const recoveryCodeCount = 10;
const totpPattern = /^\d{6}$/;
const contextOf = (userId: string) => `users.mfa_secret:${userId}`;

/** Recovery codes: 80 random bits as 16 base32 letters, shown in groups of four. */
function newRecoveryCode(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  const bytes = randomBytes(16);
  let code = "";
  for (let i = 0; i < 16; i++) code += alphabet[(bytes[i] ?? 0) & 31];
  return code.match(/.{4}/g)?.join("-") ?? code;
}

const normalizeRecoveryCode = (code: string) => code.toLowerCase().replace(/[\s-]/g, "");
const hashRecoveryCode = (code: string) =>
  createHash("sha256").update(normalizeRecoveryCode(code)).digest("hex");

const invalidCode = () =>
  new DomainError("invalid_argument", "INVALID_MFA_CODE", "the code is not valid", {
    field: "code",
  });

export function createMfa(deps: MfaDeps): Mfa {
  const { store, box, clock, audit } = deps;

  /** The time step of a valid code for `secret`, or undefined. */
  const stepOf = (secret: string, code: string): number | undefined => {
    if (!totpPattern.test(code)) return undefined;
    const result = verifySync({
      secret,
      token: code,
      epoch: Math.floor(clock.now() / 1000),
      epochTolerance: 30,
    });
    return result.valid && "timeStep" in result ? result.timeStep : undefined;
  };

  const secretOf = async (userId: string): Promise<string | undefined> => {
    const record = await store.get(userId);
    if (!record?.enabled || !record.sealedSecret) return undefined;
    return box.openString(record.sealedSecret, contextOf(userId));
  };

  async function check(userId: string, code: string): Promise<boolean> {
    const secret = await secretOf(userId);
    if (secret === undefined) return false;
    const step = stepOf(secret, code.trim());
    if (step !== undefined) return store.acceptStep(userId, step);
    return store.useRecoveryCode(userId, hashRecoveryCode(code));
  }

  const record = (
    caller: MfaCaller,
    meta: MfaMeta,
    action: string,
    outcome: "success" | "failure",
  ) =>
    audit.write({
      actorType: "user",
      actorId: caller.userId,
      action,
      target: `user:${caller.userId}`,
      outcome,
      requestId: meta.requestId,
    });

  return {
    check,

    async reset(userId) {
      const current = await store.get(userId);
      await store.disable(userId);
      return current?.enabled === true;
    },

    async enroll(caller, meta) {
      const current = await store.get(caller.userId);
      if (current?.enabled) {
        throw new DomainError("failed_precondition", "MFA_ALREADY_ENABLED", "MFA is already on");
      }
      const secret = generateSecret();
      await store.setPending(caller.userId, box.seal(secret, contextOf(caller.userId)));
      await record(caller, meta, "mfa_enroll", "success");
      const otpauthUri = generateURI({ issuer: deps.issuer, label: caller.username, secret });
      return { secret, otpauthUri };
    },

    async activate(caller, code, meta) {
      const current = await store.get(caller.userId);
      if (current?.enabled) {
        throw new DomainError("failed_precondition", "MFA_ALREADY_ENABLED", "MFA is already on");
      }
      if (!current?.sealedPending) {
        throw new DomainError("failed_precondition", "MFA_NOT_ENROLLED", "enrol first");
      }
      const secret = box.openString(current.sealedPending, contextOf(caller.userId));
      const step = stepOf(secret, code.trim());
      if (step === undefined) {
        await record(caller, meta, "mfa_activate", "failure");
        throw invalidCode();
      }
      const recoveryCodes = Array.from({ length: recoveryCodeCount }, newRecoveryCode);
      await store.activate(
        caller.userId,
        current.sealedPending,
        step,
        recoveryCodes.map(hashRecoveryCode),
      );
      await record(caller, meta, "mfa_activate", "success");
      return { recoveryCodes };
    },

    async disable(caller, code, meta) {
      if (!(await check(caller.userId, code))) {
        await record(caller, meta, "mfa_disable", "failure");
        throw invalidCode();
      }
      await store.disable(caller.userId);
      await record(caller, meta, "mfa_disable", "success");
    },
  };
}
