import { setTimeout as sleep } from "node:timers/promises";
import { beforeEach, describe, expect, it } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { createServiceAccounts } from "../../src/identity/service-accounts.js";
import { createLoginThrottle } from "../../src/identity/throttle.js";
import { silentLogger } from "../../src/log.js";
import type { Executor } from "../../src/storage/index.js";
import { databaseTargets, useAuditedDatabase } from "../support/database.js";

/**
 * Service account administration's domain on a real database (PGlite, and PostgreSQL with
 * TEST_DATABASE_URL): the `before` of an update's or a deletion's audit event is the account
 * as that change found it, also when another change commits meanwhile. The API's tests are in
 * test/integration/service-accounts.test.ts.
 */

const meta = { requestId: "req-sa" };
const actor = { userId: "", kind: "system" as const };
const clock = { now: () => Date.now() };

describe.each(databaseTargets())("service account administration (domain) on $name", (target) => {
  const opened = useAuditedDatabase(target);
  beforeEach(async () => {
    await opened.db.query("DELETE FROM service_accounts");
  });

  /**
   * Service accounts whose UPDATE and DELETE statements each wait `delays` ms first, so that
   * a concurrent change has its turn between a transaction's start and its write.
   */
  function setup(delays: { UPDATE?: number; DELETE?: number } = {}) {
    const events: AuditEventInput[] = [];
    const slowed = (tx: Executor): Executor => ({
      async query(sql, params) {
        const verb = /^\s*(UPDATE|DELETE) (?:FROM )?service_accounts\b/.exec(sql)?.[1];
        if (verb === "UPDATE" || verb === "DELETE") await sleep(delays[verb] ?? 0);
        return tx.query(sql, params);
      },
      exec: (script) => tx.exec(script),
    });
    const accounts = createServiceAccounts({
      db: {
        query: (sql, params) => opened.db.query(sql, params),
        transaction: (fn) => opened.db.transaction((tx) => fn(slowed(tx))),
      },
      tokens: { issue: () => Promise.reject(new Error("not in these tests")) },
      clock,
      throttle: createLoginThrottle(clock),
      audit: {
        write: (event) => opened.writer.write(event),
        async writeIn(tx, event) {
          const appended = await opened.writer.writeIn(tx, event);
          events.push(event);
          return appended;
        },
      },
      log: silentLogger,
      tokenTtlSeconds: 60,
      forget: () => undefined,
    });
    return { accounts, events };
  }

  const detailsOf = (events: AuditEventInput[], action: string) =>
    events
      .filter((e) => e.action === action)
      .map((e) => e.details as { before: unknown; after?: unknown });

  it("records in each of two concurrent updates the account as the other left it", async () => {
    const { accounts, events } = setup({ UPDATE: 100 });
    const { account } = await accounts.create(actor, meta, {
      name: "svc-updated",
      description: "",
      roles: ["service"],
    });
    await Promise.all([
      accounts.update(actor, meta, account.id, { roles: ["search"] }),
      accounts.update(actor, meta, account.id, { isActive: false }),
    ]);
    const initial = { name: "svc-updated", roles: ["service"], is_active: true };
    const updates = detailsOf(events, "service_account_update");
    const first = updates.find((d) => JSON.stringify(d.before) === JSON.stringify(initial));
    const second = updates.find((d) => d !== first);
    expect(first).toBeDefined();
    expect(second?.before).toEqual(first?.after);
    expect(second?.after).toEqual({ name: "svc-updated", roles: ["search"], is_active: false });
  });

  it("records in a deletion the account as a concurrent update left it", async () => {
    const { accounts, events } = setup({ UPDATE: 50, DELETE: 300 });
    const { account } = await accounts.create(actor, meta, {
      name: "svc-deleted",
      description: "",
      roles: ["service"],
    });
    // The update commits while the deletion waits before its DELETE.
    await Promise.all([
      accounts.update(actor, meta, account.id, { roles: ["search"] }),
      accounts.delete(actor, meta, account.id),
    ]);
    const [update] = detailsOf(events, "service_account_update");
    expect(update?.after).toEqual({ name: "svc-deleted", roles: ["search"], is_active: true });
    expect(detailsOf(events, "service_account_delete")).toEqual([{ before: update?.after }]);
  });
});
