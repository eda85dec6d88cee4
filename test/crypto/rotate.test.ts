import { randomUUID } from "node:crypto";
import { generateSecret, generateSync } from "otplib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createAuditWriter } from "../../src/audit/index.js";
import { type RotationProgress, rotateSealedValues } from "../../src/crypto/rotate.js";
import { runKeysRotateCommand } from "../../src/crypto/rotate-command.js";
import { type SealedColumn, sealedColumns } from "../../src/crypto/sealed-columns.js";
import { createSecretBox, parseDataKeys, type SecretBox } from "../../src/crypto/secret-box.js";
import { coreSecretContext } from "../../src/gateway/plugins.js";
import { createMfa } from "../../src/identity/mfa.js";
import { silentLogger } from "../../src/log.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";

const key = (fill: number) => Buffer.alloc(32, fill).toString("base64");
const oldKey = key(1);
const newKey = key(2);
const strayKey = key(9);

/** Before the rotation: seals with the old key. */
const oldBox = createSecretBox(parseDataKeys(oldKey));
/** During the rotation: the new key current, the old one previous. */
const rotatingBox = createSecretBox(parseDataKeys(newKey, oldKey));
/** After the rotation: the new key alone. */
const newBox = createSecretBox(parseDataKeys(newKey));
const strayBox = createSecretBox(parseDataKeys(strayKey));

const context = (userId: string) => `users.mfa_secret:${userId}`;

interface SealedUser {
  id: string;
  username: string;
  /** Plaintext TOTP secret, active or pending. */
  secret: string;
}

async function insertUser(
  db: Database,
  options: { active?: string | null; pending?: string | null } = {},
): Promise<string> {
  const id = randomUUID();
  await db.query(
    `INSERT INTO users (id, username, password_hash, mfa_enabled, mfa_secret, mfa_pending_secret)
     VALUES ($1, $2, 'not-a-real-hash', $3, $4, $5)`,
    [id, `user-${id}`, options.active != null, options.active ?? null, options.pending ?? null],
  );
  return id;
}

/** A user with MFA on (or only enrolled), the secret sealed by `box`. */
async function userWithMfa(
  db: Database,
  box: SecretBox,
  state: "active" | "pending",
): Promise<SealedUser> {
  const secret = generateSecret();
  const id = randomUUID();
  const sealed = box.seal(secret, context(id));
  await db.query(
    `INSERT INTO users (id, username, password_hash, mfa_enabled, mfa_secret, mfa_pending_secret)
     VALUES ($1, $2, 'not-a-real-hash', $3, $4, $5)`,
    [
      id,
      `user-${id}`,
      state === "active",
      state === "active" ? sealed : null,
      state === "pending" ? sealed : null,
    ],
  );
  return { id, username: `user-${id}`, secret };
}

async function sealedOf(db: Database, id: string) {
  const { rows } = await db.query<{ mfa_secret: string | null; mfa_pending_secret: string | null }>(
    "SELECT mfa_secret, mfa_pending_secret FROM users WHERE id = $1",
    [id],
  );
  return rows[0];
}

async function allSealed(db: Database): Promise<string[]> {
  const { rows } = await db.query<{ v: string }>(
    `SELECT mfa_secret AS v FROM users WHERE mfa_secret IS NOT NULL
     UNION ALL SELECT mfa_pending_secret FROM users WHERE mfa_pending_secret IS NOT NULL`,
  );
  return rows.map((r) => r.v);
}

const totalsOf = (report: Awaited<ReturnType<typeof rotateSealedValues>>, column: string) =>
  report.columns.find((c) => c.column === column);

describe("sealed columns", () => {
  it("cover both MFA columns, with the context mfa.ts seals with", () => {
    const mfa = sealedColumns.filter((c) => c.table === "users");
    expect(mfa.map((c) => c.column).sort()).toEqual(["mfa_pending_secret", "mfa_secret"]);
    for (const c of mfa) expect(c.contextOf("42")).toBe("users.mfa_secret:42");
  });

  it("cover every area that seals: settings and the plugins' core secrets too", () => {
    expect(sealedColumns.map((c) => `${c.table}.${c.column}`).sort()).toEqual([
      "console_sessions.sealed",
      "plugins.core_secret_sealed",
      "settings.sealed",
      "users.mfa_pending_secret",
      "users.mfa_secret",
    ]);
    const plugins = sealedColumns.find((c) => c.table === "plugins");
    expect(plugins?.contextOf("rag")).toBe(coreSecretContext("rag"));
  });
});

describe.each(databaseTargets())("keys rotate on $name", (target) => {
  let db: Database;
  beforeEach(async () => {
    db = await openTestDatabase(target);
  });
  afterEach(async () => db?.close());

  it("reseals every old value under the new key in batches; MFA then works with the new key alone", async () => {
    const active = [];
    for (let i = 0; i < 5; i++) active.push(await userWithMfa(db, oldBox, "active"));
    const pending = [
      await userWithMfa(db, oldBox, "pending"),
      await userWithMfa(db, oldBox, "pending"),
    ];
    const alreadyNew = await userWithMfa(db, rotatingBox, "active");
    const alreadyNewSealed = (await sealedOf(db, alreadyNew.id))?.mfa_secret;
    await insertUser(db); // no MFA: NULL columns are skipped
    const before = await allSealed(db);

    const progress: RotationProgress[] = [];
    const report = await rotateSealedValues(db, rotatingBox, {
      batchSize: 2,
      onProgress: (p) => progress.push(p),
    });

    expect(report.unreadable).toEqual([]);
    expect(totalsOf(report, "users.mfa_secret")).toEqual({
      column: "users.mfa_secret",
      checked: 6,
      resealed: 5,
      changedMeanwhile: 0,
      unreadable: 0,
    });
    expect(totalsOf(report, "users.mfa_pending_secret")).toMatchObject({
      checked: 2,
      resealed: 2,
    });
    // Progress after every batch of 2: 3 batches for 6 values, 1 for 2.
    const batches = progress.filter((p) => p.kind === "batch");
    expect(batches.map((p) => p.kind === "batch" && p.totals.checked)).toEqual([2, 4, 6, 2]);

    const after = await allSealed(db);
    expect(after).toHaveLength(before.length);
    for (const value of after) expect(newBox.needsRotation(value)).toBe(false);
    for (const value of before) {
      if (value !== alreadyNewSealed) expect(after).not.toContain(value);
    }
    expect((await sealedOf(db, alreadyNew.id))?.mfa_secret).toBe(alreadyNewSealed);
    for (const u of [...active, alreadyNew]) {
      const row = await sealedOf(db, u.id);
      expect(newBox.openString(row?.mfa_secret ?? "", context(u.id))).toBe(u.secret);
    }

    // The MFA code of a user checks with the new key alone, and a pending enrolment activates.
    const now = Date.now();
    const audit = createAuditWriter({ db, log: silentLogger });
    try {
      const mfa = createMfa({
        db,
        box: newBox,
        clock: { now: () => now },
        audit,
        issuer: "Traitgate test",
      });
      const code = (secret: string) => generateSync({ secret, epoch: Math.floor(now / 1000) });
      const [first] = active;
      expect(await mfa.check(first?.id ?? "", code(first?.secret ?? ""))).toBe(true);
      const [enrolled] = pending;
      const activated = await mfa.activate(
        { userId: enrolled?.id ?? "", username: enrolled?.username ?? "" },
        code(enrolled?.secret ?? ""),
        { requestId: "test" },
      );
      expect(activated.recoveryCodes).toHaveLength(10);
    } finally {
      await audit.close();
    }

    // A second run finds nothing to move and changes nothing.
    const settled = await allSealed(db);
    const again = await rotateSealedValues(db, rotatingBox, { batchSize: 2 });
    for (const c of again.columns) expect(c.resealed).toBe(0);
    expect(totalsOf(again, "users.mfa_secret")?.checked).toBe(7);
    expect((await allSealed(db)).sort()).toEqual(settled.sort());
  });

  it("leaves a value that changed after it was read as the other writer set it", async () => {
    const users = [
      await userWithMfa(db, oldBox, "active"),
      await userWithMfa(db, oldBox, "active"),
      await userWithMfa(db, oldBox, "active"),
    ];
    const raced = users[1]!;
    const newSecret = generateSecret();
    const racedValue = rotatingBox.seal(newSecret, context(raced.id));
    // Another writer (the user enrolling again) commits between the read and the write.
    let raceDone = false;
    const racing: Database = {
      ...db,
      async transaction(fn) {
        if (!raceDone) {
          raceDone = true;
          await db.query("UPDATE users SET mfa_secret = $2 WHERE id = $1", [raced.id, racedValue]);
        }
        return db.transaction(fn);
      },
    };

    const report = await rotateSealedValues(racing, rotatingBox, {
      columns: sealedColumns.filter((c) => c.column === "mfa_secret"),
    });

    expect(raceDone).toBe(true);
    expect(report.columns[0]).toMatchObject({ checked: 3, resealed: 2, changedMeanwhile: 1 });
    expect((await sealedOf(db, raced.id))?.mfa_secret).toBe(racedValue);
    for (const u of users) {
      const value = (await sealedOf(db, u.id))?.mfa_secret ?? "";
      expect(newBox.openString(value, context(u.id))).toBe(u === raced ? newSecret : u.secret);
    }
  });

  it("names values that do not open by row id, never by value, and moves the rest", async () => {
    const good = await userWithMfa(db, oldBox, "active");
    const strayUser = await userWithMfa(db, strayBox, "active"); // a key nobody configured
    const source = await userWithMfa(db, oldBox, "active");
    // Copied from another user's row: the context does not match.
    const copied = await insertUser(db, { active: (await sealedOf(db, source.id))?.mfa_secret });
    const malformed = await insertUser(db, { pending: "tg1.not-a-sealed-value" });
    const before = {
      stray: (await sealedOf(db, strayUser.id))?.mfa_secret,
      copied: (await sealedOf(db, copied))?.mfa_secret,
    };

    const progress: string[] = [];
    const summary: string[] = [];
    const code = await runKeysRotateCommand(db, parseDataKeys(newKey, oldKey), {
      progress: { write: (t: string) => progress.push(t) },
      out: { write: (t: string) => summary.push(t) },
      batchSize: 2,
    });

    expect(code).toBe(1);
    const printed = progress.join("") + summary.join("");
    expect(printed).toContain(
      `users.mfa_secret: row ${strayUser.id} cannot be opened (UNKNOWN_KEY, key id ${parseDataKeys(strayKey).current.id})`,
    );
    expect(printed).toContain(`users.mfa_secret: row ${copied} cannot be opened (DECRYPT_FAILED)`);
    expect(printed).toContain(
      `users.mfa_pending_secret: row ${malformed} cannot be opened (MALFORMED)`,
    );
    expect(summary.join("")).toContain(
      "users.mfa_secret: 4 checked, 2 resealed, 0 changed meanwhile, 2 unreadable",
    );
    expect(summary.join("")).toMatch(/3 value\(s\) could not be opened/);
    for (const secret of [before.stray!, before.copied!, good.secret, strayUser.secret]) {
      expect(printed).not.toContain(secret);
    }
    expect(printed).not.toContain("not-a-sealed-value");
    // The readable ones moved; the unreadable ones are untouched.
    for (const u of [good, source]) {
      const value = (await sealedOf(db, u.id))?.mfa_secret ?? "";
      expect(newBox.openString(value, context(u.id))).toBe(u.secret);
    }
    expect((await sealedOf(db, strayUser.id))?.mfa_secret).toBe(before.stray);
    expect((await sealedOf(db, copied))?.mfa_secret).toBe(before.copied);
  });

  it("reports done, naming only key ids, when everything is under the current key", async () => {
    await userWithMfa(db, oldBox, "active");
    const out: string[] = [];
    const keys = parseDataKeys(newKey, oldKey);
    const write = { write: (t: string) => out.push(t) };
    expect(await runKeysRotateCommand(db, keys, { progress: write, out: write })).toBe(0);
    const text = out.join("");
    expect(text).toContain(
      `current key ${keys.current.id}; previous keys: ${keys.previous[0]?.id}`,
    );
    expect(text).toContain("users.mfa_secret: 1 checked, 1 resealed");
    expect(text).toContain(`done: every sealed value is under key ${keys.current.id}`);
    expect(text).not.toContain(oldKey);
    expect(text).not.toContain(newKey);
  });

  it("reseals secret settings too", async () => {
    const context = (key: string) => `settings:${key}`;
    await db.query(
      "INSERT INTO settings (key, value, sealed, version) VALUES ($1, NULL, $2, 1), ($3, $4, NULL, 1)",
      ["a.secret", oldBox.seal("s3cret-value", context("a.secret")), "a.plain", JSON.stringify(3)],
    );
    const report = await rotateSealedValues(db, rotatingBox);
    expect(totalsOf(report, "settings.sealed")).toMatchObject({ checked: 1, resealed: 1 });
    const { rows } = await db.query<{ sealed: string }>(
      "SELECT sealed FROM settings WHERE key = 'a.secret'",
    );
    expect(newBox.openString(rows[0]?.sealed ?? "", context("a.secret"))).toBe("s3cret-value");
  });

  it("walks a column another area adds with one descriptor (text ids)", async () => {
    await db.exec(
      "CREATE TABLE plugin_credentials (plugin_id text PRIMARY KEY, credential text NOT NULL)",
    );
    const credentials: SealedColumn = {
      table: "plugin_credentials",
      idColumn: "plugin_id",
      column: "credential",
      contextOf: (id) => `plugins.credential:${id}`,
    };
    const ids = ["alpha", "beta", "gamma"];
    for (const id of ids) {
      await db.query("INSERT INTO plugin_credentials VALUES ($1, $2)", [
        id,
        oldBox.seal(`credential of ${id}`, `plugins.credential:${id}`),
      ]);
    }
    const report = await rotateSealedValues(db, rotatingBox, {
      columns: [...sealedColumns, credentials],
      batchSize: 2,
    });
    expect(totalsOf(report, "plugin_credentials.credential")).toMatchObject({
      checked: 3,
      resealed: 3,
    });
    const { rows } = await db.query<{ plugin_id: string; credential: string }>(
      "SELECT plugin_id, credential FROM plugin_credentials ORDER BY plugin_id",
    );
    for (const row of rows) {
      expect(newBox.openString(row.credential, `plugins.credential:${row.plugin_id}`)).toBe(
        `credential of ${row.plugin_id}`,
      );
    }
  });
});
