import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { silentLogger } from "../../src/log.js";
import { defaultPolicy } from "../../src/policy/index.js";
import { ensureActivePolicy, loadActivePolicy } from "../../src/policy/lifecycle.js";
import { startLivePolicy } from "../../src/policy/live.js";
import { policyStore } from "../../src/policy/policy-store.js";
import type { Database } from "../../src/storage/index.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";

/** The policy area's storage (migration 0009) on PGlite and, with TEST_DATABASE_URL, PostgreSQL. */

const by = { username: "tester", userId: "u-1", requestId: "r-1" };
const tiny = {
  rules: [
    {
      id: "viewers",
      description: "viewers search",
      contexts: ["SEARCH"],
      when: { all: ["role:viewer"] },
      decision: "allow" as const,
    },
  ],
};

describe.each(databaseTargets())("policy storage on $name", (target) => {
  let db: Database;
  const audit: AuditEventInput[] = [];
  const writer = {
    write: async (e: AuditEventInput) => {
      audit.push(e);
      return { id: "e", seq: "1", hash: "h" };
    },
    writeIn: async (_tx: unknown, e: AuditEventInput) => {
      audit.push(e);
      return { id: "e", seq: "1", hash: "h" };
    },
  };

  beforeAll(async () => {
    db = await openTestDatabase(target);
  });
  afterAll(async () => {
    await db?.close();
  });

  it("activates the shipped policy once, however many processes start at once", async () => {
    await Promise.all([
      ensureActivePolicy({ db, audit: writer, log: silentLogger }),
      ensureActivePolicy({ db, audit: writer, log: silentLogger }),
      ensureActivePolicy({ db, audit: writer, log: silentLogger }),
    ]);
    const { rows } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM policy_activations",
    );
    expect(rows[0]?.n).toBe(1);
    expect(audit.filter((e) => e.action === "policy_activate")).toHaveLength(1);
    const loaded = await loadActivePolicy(db);
    expect(loaded.engine.document).toEqual(defaultPolicy);
    expect(loaded.generation).toBe(1);
  });

  it("stores a version once per content, activates it and raises the generation", async () => {
    const version = "a".repeat(64);
    const first = await db.transaction((tx) => policyStore.putVersion(tx, version, tiny, "t", by));
    const again = await db.transaction((tx) => policyStore.putVersion(tx, version, tiny, "t", by));
    expect([first, again]).toEqual([true, false]);
    const before = await policyStore.generation(db);
    const generation = await db.transaction(async (tx) => {
      const state = await policyStore.lockState(tx);
      return policyStore.activate(tx, version, state.activeVersion, by);
    });
    expect(generation).toBe(before + 1);
    const snapshot = await policyStore.snapshot(db);
    expect(snapshot).toMatchObject({ generation, activeVersion: version, document: tiny });
    const [latest] = await policyStore.activations(db, { limit: 1, beforeSeq: undefined });
    expect(latest).toMatchObject({ version, activatedBy: "tester", requestId: "r-1" });
    expect(latest?.previousVersion).toMatch(/^[0-9a-f]{64}$/);
  });

  it("keeps registered traits and hands them to the snapshot", async () => {
    await db.transaction(async (tx) => {
      await policyStore.putTrait(tx, { name: "role:intern", implies: ["role:viewer"] }, by);
      await policyStore.putTrait(
        tx,
        { name: "role:intern", implies: ["role:viewer"], description: "x" },
        by,
      );
      await policyStore.bump(tx);
    });
    const snapshot = await policyStore.snapshot(db);
    expect(snapshot.traits).toEqual([
      { name: "role:intern", description: "x", implies: ["role:viewer"], conflicts: [] },
    ]);
  });

  it("reloads a process's engine on notification when another changes the generation", async () => {
    const live = await startLivePolicy({
      db,
      load: () => loadActivePolicy(db),
      generation: () => policyStore.generation(db),
      log: silentLogger,
      pollIntervalMs: 60_000,
    });
    try {
      const before = live.generation();
      await db.transaction(async (tx) => {
        await policyStore.lockState(tx);
        const next = await policyStore.bump(tx);
        await policyStore.notify(tx, next);
      });
      const started = performance.now();
      while (live.generation() === before && performance.now() - started < 2_000) {
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(live.generation()).toBe(before + 1);
      expect(live.current().registry.idOf("role:intern")).toBeDefined();
    } finally {
      await live.close();
    }
  });
});
