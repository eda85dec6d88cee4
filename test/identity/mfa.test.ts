import { setTimeout as sleep } from "node:timers/promises";
import { generateSync } from "otplib";
import { beforeEach, describe, expect, it } from "vitest";
import { createSecretBox, parseDataKeys } from "../../src/crypto/secret-box.js";
import { createMfa, type MfaDeps } from "../../src/identity/mfa.js";
import { createUserStore } from "../../src/identity/user-store.js";
import { databaseTargets, useAuditedDatabase } from "../support/database.js";
import { rejection } from "../support/errors.js";

/**
 * MFA activation's domain on a real database (PGlite, and PostgreSQL with TEST_DATABASE_URL):
 * the activation turns on the enrolment it checked the code against, or nothing. Login, enrol
 * and disable end to end are in test/integration/mfa.test.ts.
 */

const meta = { requestId: "req-mfa" };
const box = createSecretBox(parseDataKeys(Buffer.alloc(32, 3).toString("base64")));

describe.each(databaseTargets())("MFA activation (domain) on $name", (target) => {
  const now = Date.now();
  const code = (secret: string) => generateSync({ secret, epoch: Math.floor(now / 1000) });
  const opened = useAuditedDatabase(target);
  beforeEach(async () => {
    await opened.db.query("DELETE FROM users");
  });

  const mfaOn = (handle: MfaDeps["db"]) =>
    createMfa({ db: handle, box, clock: { now: () => now }, audit: opened.writer, issuer: "Test" });

  /** A user with a pending enrolment: who they are and the secret to make codes from. */
  async function enrolled() {
    const user = await createUserStore(opened.db).create({
      username: `user-${crypto.randomUUID().slice(0, 8)}`,
      email: "",
      passwordHash: "x",
      roles: [],
    });
    const caller = { userId: user.id, username: user.username };
    const { secret } = await mfaOn(opened.db).enroll(caller, meta);
    return { caller, secret };
  }

  async function stateOf(userId: string) {
    const { rows } = await opened.db.query<{
      mfa_enabled: boolean;
      mfa_secret: string | null;
      activations: number;
      codes: number;
    }>(
      `SELECT mfa_enabled, mfa_secret,
              (SELECT count(*)::int FROM audit_events
                WHERE action = 'mfa_activate' AND outcome = 'success' AND target = $2) AS activations,
              (SELECT count(*)::int FROM mfa_recovery_codes WHERE user_id = $1) AS codes
         FROM users WHERE id = $1`,
      [userId, `user:${userId}`],
    );
    return rows[0];
  }

  it("turns MFA on once when two activations with the same code race", async () => {
    const { caller, secret } = await enrolled();
    const mfa = mfaOn(opened.db);
    const results = await Promise.allSettled([
      mfa.activate(caller, code(secret), meta),
      mfa.activate(caller, code(secret), meta),
    ]);
    const won = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
    const lost = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    expect(won).toHaveLength(1);
    expect(lost).toMatchObject([{ kind: "failed_precondition", reason: "MFA_ALREADY_ENABLED" }]);
    expect(await stateOf(caller.userId)).toMatchObject({
      mfa_enabled: true,
      activations: 1,
      codes: 10,
    });
    // The recovery codes the winner was given are the ones that work.
    expect(await mfa.check(caller.userId, won[0]?.recoveryCodes[0] ?? "")).toBe(true);
  });

  it("leaves MFA off when an administrator's reset commits between the activation's read and its write", async () => {
    const { caller, secret } = await enrolled();
    // The reset commits just before the activation's transaction begins (after its read).
    let reset: (() => Promise<unknown>) | undefined = () =>
      opened.db.transaction((tx) => mfaOn(opened.db).reset(tx, caller.userId));
    const mfa = mfaOn({
      query: (sql, params) => opened.db.query(sql, params),
      async transaction(fn) {
        const before = reset;
        reset = undefined;
        await before?.();
        return opened.db.transaction(fn);
      },
    });
    const err = await rejection(mfa.activate(caller, code(secret), meta));
    expect([err.kind, err.reason]).toEqual(["failed_precondition", "MFA_NOT_ENROLLED"]);
    expect(await stateOf(caller.userId)).toEqual({
      mfa_enabled: false,
      mfa_secret: null,
      activations: 0,
      codes: 0,
    });
  });

  it("reports whether MFA was on as the reset found it when an activation races it", async () => {
    const { caller, secret } = await enrolled();
    // Right after the reset has read the user, an activation starts on another connection and
    // gets 200 ms to commit before the reset goes on. With the row locked by the reset's read,
    // it waits for the reset and then finds nothing to turn on; without the lock it commits,
    // and the reset turns off an MFA it had read as off.
    // (Started from here, outside the reset's transaction, once the reset has read.)
    let read = () => {};
    const activation = new Promise<void>((resolve) => {
      read = resolve;
    }).then(() => mfaOn(opened.db).activate(caller, code(secret), meta));
    const activated = activation.then(
      () => true,
      () => false,
    );
    let waited = false;
    const wasEnabled = await opened.db.transaction((tx) =>
      mfaOn(opened.db).reset(
        {
          async query<R>(sql: string, params?: readonly unknown[]) {
            const result = await tx.query<R>(sql, params);
            if (!waited && /^\s*SELECT\b/i.test(sql)) {
              waited = true;
              read();
              await Promise.race([activated, sleep(200)]);
            }
            return result;
          },
        },
        caller.userId,
      ),
    );
    // The reset's answer (its audit event's `mfa_was_enabled`) agrees with what happened.
    expect(wasEnabled).toBe(await activated);
    expect(await stateOf(caller.userId)).toMatchObject({ mfa_enabled: false, codes: 0 });
  });
});
