import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { AuditWriterStats } from "../../src/audit/writer.js";
import { collectCoreMetrics } from "../../src/metrics/index.js";
import type { ListenerStats } from "../../src/server/listener.js";
import type { DatabaseStats } from "../../src/storage/index.js";
import { parseExposition, sampleValue } from "../support/prometheus.js";

/**
 * The metrics read at scrape time from counts the core keeps anyway: each scrape shows the
 * counts as they are then (counters are not added up twice), and series that do not apply
 * (no pool on PGlite, no last-resort guard in a test process) are absent.
 */

function sources() {
  const listener: ListenerStats = { connections: 3, requests: 2, refusedConnections: 0 };
  const db: DatabaseStats = {
    pool: { total: 4, idle: 1, waiting: 5, max: 10, failedConnections: 1 },
    timeouts: 2,
    connectionErrors: 7,
  };
  const audit: AuditWriterStats = {
    transactions: 9,
    failedTransactions: 0,
    events: 90,
    largestBatch: 40,
    refusedQueueFull: 6,
    queued: 12,
  };
  let caught = 0;
  return {
    listener,
    db,
    audit,
    guard: { caught: () => caught, bump: () => caught++ },
    core: {
      listener: { stats: () => listener },
      db: { stats: () => db },
      audit: { stats: () => audit },
    },
  };
}

describe("metrics read at scrape time", () => {
  it("shows the listener, audit writer, database pool and last-resort guard as they are", async () => {
    const s = sources();
    const registry = new Registry();
    collectCoreMetrics(registry, { ...s.core, lastResort: s.guard });
    const read = async () => parseExposition(await registry.metrics());

    let samples = await read();
    expect(sampleValue(samples, "traitgate_connections_open")).toBe(3);
    expect(sampleValue(samples, "traitgate_requests_in_flight")).toBe(2);
    expect(sampleValue(samples, "traitgate_connections_refused_total")).toBe(0);
    expect(sampleValue(samples, "traitgate_audit_queue_events")).toBe(12);
    expect(sampleValue(samples, "traitgate_audit_refused_total")).toBe(6);
    expect(sampleValue(samples, "traitgate_db_errors_total", { kind: "timeout" })).toBe(2);
    expect(sampleValue(samples, "traitgate_db_errors_total", { kind: "connection" })).toBe(7);
    expect(sampleValue(samples, "traitgate_db_pool_connections")).toBe(4);
    expect(sampleValue(samples, "traitgate_db_pool_idle_connections")).toBe(1);
    expect(sampleValue(samples, "traitgate_db_pool_waiting_requests")).toBe(5);
    expect(sampleValue(samples, "traitgate_db_pool_max_connections")).toBe(10);
    expect(sampleValue(samples, "traitgate_db_pool_connection_failures_total")).toBe(1);
    expect(sampleValue(samples, "traitgate_last_resort_errors_total")).toBe(0);
    expect(sampleValue(samples, "process_cpu_seconds_total")).toBeGreaterThan(0);

    // Later scrapes: the counts then, not sums of every scrape.
    s.listener.refusedConnections = 4;
    s.guard.bump();
    s.db.timeouts = 3;
    s.audit.queued = 0;
    await read();
    samples = await read();
    expect(sampleValue(samples, "traitgate_connections_refused_total")).toBe(4);
    expect(sampleValue(samples, "traitgate_last_resort_errors_total")).toBe(1);
    expect(sampleValue(samples, "traitgate_db_errors_total", { kind: "timeout" })).toBe(3);
    expect(sampleValue(samples, "traitgate_audit_queue_events")).toBe(0);
  });

  it("leaves out what does not apply: the pool on PGlite, the guard in tests", async () => {
    const s = sources();
    s.db.pool = undefined;
    const registry = new Registry();
    collectCoreMetrics(registry, s.core);
    const samples = parseExposition(await registry.metrics());
    expect(samples.filter((x) => x.name.startsWith("traitgate_db_pool_"))).toEqual([]);
    expect(sampleValue(samples, "traitgate_last_resort_errors_total")).toBeUndefined();
    expect(sampleValue(samples, "traitgate_db_errors_total", { kind: "timeout" })).toBe(2);
  });
});
