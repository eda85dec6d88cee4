import { createHash, randomBytes } from "node:crypto";
import { generateSecret, generateURI, verifySync } from "otplib";
import { requestFields } from "../audit/event.js";
import type { AuditEventInput, AuditWriter, RequestOrigin } from "../audit/index.js";
import type { SecretBox } from "../crypto/secret-box.js";
import { DomainError } from "../errors.js";
import type { Queryable, Session } from "../storage/index.js";
import { createMfaStore, type MfaStore } from "./mfa-store.js";
import type { Clock } from "./tokens.js";

/**
 * TOTP multi-factor authentication (RFC 6238: SHA-1, 6 digits, 30 s steps,
 * one step of tolerance either way). Enrol → activate with a first code →
 * on. A code is accepted once: the step it belongs to is recorded atomically,
 * and that step or an older one is refused afterwards. Recovery codes are
 * single-use and stored hashed; the TOTP secret is sealed at rest. Each change
 * (enrolment, activation, disabling, an administrator's reset) commits with its
 * audit event or not at all.
 */

export interface MfaCaller {
  userId: string;
  username: string;
}

export interface MfaMeta {
  requestId: string;
  origin?: RequestOrigin | undefined;
}

export interface Mfa {
  enroll(caller: MfaCaller, meta: MfaMeta): Promise<{ secret: string; otpauthUri: string }>;
  activate(caller: MfaCaller, code: string, meta: MfaMeta): Promise<{ recoveryCodes: string[] }>;
  disable(caller: MfaCaller, code: string, meta: MfaMeta): Promise<void>;
  /** For login: a current TOTP code or an unused recovery code of the user. */
  check(userId: string, code: string): Promise<boolean>;
  /**
   * An administrator's reset: MFA off, secret and recovery codes deleted, in the caller's
   * transaction (which writes the administrator's audit event). Was it on?
   */
  reset(tx: Queryable, userId: string): Promise<boolean>;
}

export interface MfaDeps {
  /** Where MFA state lives; each change and its audit event are one transaction. */
  db: Queryable & Pick<Session, "transaction">;
  box: SecretBox;
  clock: Clock;
  /** `writeIn` for changes (in their transaction), `write` for refused attempts. */
  audit: Pick<AuditWriter, "write" | "writeIn">;
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

const alreadyEnabled = () =>
  new DomainError("failed_precondition", "MFA_ALREADY_ENABLED", "MFA is already on");

const notEnrolled = () => new DomainError("failed_precondition", "MFA_NOT_ENROLLED", "enrol first");

const invalidCode = () =>
  new DomainError("invalid_argument", "INVALID_MFA_CODE", "the code is not valid", {
    field: "code",
  });

export function createMfa(deps: MfaDeps): Mfa {
  const { db, box, clock, audit } = deps;
  const store = createMfaStore(db);

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

  /** A current TOTP code or an unused recovery code of the user, used up on `on`. */
  async function checkOn(on: MfaStore, userId: string, code: string): Promise<boolean> {
    const record = await on.get(userId);
    if (!record?.enabled || !record.sealedSecret) return false;
    const secret = box.openString(record.sealedSecret, contextOf(userId));
    const step = stepOf(secret, code.trim());
    if (step !== undefined) return on.acceptStep(userId, step);
    return on.useRecoveryCode(userId, hashRecoveryCode(code));
  }

  const eventOf = (
    caller: MfaCaller,
    meta: MfaMeta,
    action: string,
    outcome: "success" | "failure",
  ): AuditEventInput => ({
    actorType: "user",
    actorId: caller.userId,
    action,
    target: `user:${caller.userId}`,
    outcome,
    ...requestFields(meta),
  });

  /** A refused attempt, committed to the audit log before the refusal is answered. */
  const refused = (caller: MfaCaller, meta: MfaMeta, action: string) =>
    audit.write(eventOf(caller, meta, action, "failure"));

  /**
   * Runs a change of the caller's MFA in a transaction with its audit event: both commit,
   * or neither (an event that cannot be written rolls the change back: 503
   * AUDIT_UNAVAILABLE). `change` returns false when it changed nothing: then no event.
   */
  const audited = (
    caller: MfaCaller,
    meta: MfaMeta,
    action: string,
    change: (inTx: MfaStore) => Promise<boolean>,
  ): Promise<boolean> =>
    db.transaction(async (tx) => {
      if (!(await change(createMfaStore(tx)))) return false;
      await audit.writeIn(tx, eventOf(caller, meta, action, "success"));
      return true;
    });

  return {
    check: (userId, code) => checkOn(store, userId, code),

    async reset(tx, userId) {
      const inTx = createMfaStore(tx);
      // Locked: an activation racing the reset waits for it, so "was it on" stays true.
      const current = await inTx.getForUpdate(userId);
      await inTx.disable(userId);
      return current?.enabled === true;
    },

    async enroll(caller, meta) {
      const current = await store.get(caller.userId);
      if (current?.enabled) throw alreadyEnabled();
      const secret = generateSecret();
      const sealed = box.seal(secret, contextOf(caller.userId));
      await audited(caller, meta, "mfa_enroll", async (inTx) => {
        await inTx.setPending(caller.userId, sealed);
        return true;
      });
      const otpauthUri = generateURI({ issuer: deps.issuer, label: caller.username, secret });
      return { secret, otpauthUri };
    },

    async activate(caller, code, meta) {
      const current = await store.get(caller.userId);
      if (current?.enabled) throw alreadyEnabled();
      if (!current?.sealedPending) throw notEnrolled();
      const secret = box.openString(current.sealedPending, contextOf(caller.userId));
      const step = stepOf(secret, code.trim());
      if (step === undefined) {
        await refused(caller, meta, "mfa_activate");
        throw invalidCode();
      }
      const recoveryCodes = Array.from({ length: recoveryCodeCount }, newRecoveryCode);
      const sealed = current.sealedPending;
      // Only the enrolment the code was checked against, and only while MFA is off: a reset or
      // another activation that committed since the read above wins, and this one changes
      // nothing and writes no event.
      const activated = await audited(caller, meta, "mfa_activate", (inTx) =>
        inTx.activate(caller.userId, sealed, step, recoveryCodes.map(hashRecoveryCode)),
      );
      if (!activated) {
        const now = await store.get(caller.userId);
        throw now?.enabled ? alreadyEnabled() : notEnrolled();
      }
      return { recoveryCodes };
    },

    async disable(caller, code, meta) {
      // The code is used up in the same transaction: kept if MFA stays on.
      const disabled = await audited(caller, meta, "mfa_disable", async (inTx) => {
        if (!(await checkOn(inTx, caller.userId, code))) return false;
        await inTx.disable(caller.userId);
        return true;
      });
      if (!disabled) {
        await refused(caller, meta, "mfa_disable");
        throw invalidCode();
      }
    },
  };
}
