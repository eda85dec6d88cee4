import { Counter, collectDefaultMetrics, Gauge, type Registry } from "prom-client";
import type { AuditWriterStats } from "../audit/writer.js";
import type { ListenerStats } from "../server/listener.js";
import type { DatabaseStats } from "../storage/index.js";

/**
 * Metrics read when Prometheus scrapes, from the counts the parts of the core keep anyway
 * (the listener, the database handle, the audit writer, the last-resort guard): nothing is
 * added to any request's path. Plus the process's own (CPU, memory, event loop, GC).
 */
export interface CoreSources {
  listener: { stats(): ListenerStats };
  db: { stats(): DatabaseStats };
  audit: { stats(): AuditWriterStats };
  /** `traitgate serve` and `demo` install it (src/server/last-resort.ts); tests do not. */
  lastResort?: { caught(): number } | undefined;
}

export function collectCoreMetrics(registry: Registry, sources: CoreSources): void {
  const registers = [registry];
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read());
      },
    });
  // A counter whose count is kept elsewhere: each scrape reads it.
  const counter = (name: string, help: string, read: () => number) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.inc(read());
      },
    });

  gauge(
    "traitgate_connections_open",
    "Open client connections (every protocol).",
    () => sources.listener.stats().connections,
  );
  gauge(
    "traitgate_requests_in_flight",
    "Requests being answered now.",
    () => sources.listener.stats().requests,
  );
  counter(
    "traitgate_connections_refused_total",
    "Connections closed at once by MAX_CONNECTIONS or MAX_CONNECTIONS_PER_ADDRESS.",
    () => sources.listener.stats().refusedConnections,
  );

  gauge(
    "traitgate_audit_queue_events",
    "Audit events waiting for the next batch.",
    () => sources.audit.stats().queued,
  );
  counter(
    "traitgate_audit_refused_total",
    "Audit writes refused at once because the queue was full (AUDIT_UNAVAILABLE).",
    () => sources.audit.stats().refusedQueueFull,
  );

  new Counter({
    name: "traitgate_db_errors_total",
    help: "Database calls that failed as unavailable, by kind (timeout, connection).",
    labelNames: ["kind"] as const,
    registers,
    collect() {
      const { timeouts, connectionErrors } = sources.db.stats();
      this.reset();
      this.inc({ kind: "timeout" }, timeouts);
      this.inc({ kind: "connection" }, connectionErrors);
    },
  });
  if (sources.db.stats().pool !== undefined) {
    const pool = () =>
      sources.db.stats().pool ?? { total: 0, idle: 0, waiting: 0, max: 0, failedConnections: 0 };
    gauge(
      "traitgate_db_pool_connections",
      "PostgreSQL connections open (idle and in use).",
      () => pool().total,
    );
    gauge(
      "traitgate_db_pool_idle_connections",
      "PostgreSQL connections open and idle.",
      () => pool().idle,
    );
    gauge(
      "traitgate_db_pool_waiting_requests",
      "Callers waiting for a PostgreSQL connection.",
      () => pool().waiting,
    );
    gauge("traitgate_db_pool_max_connections", "The PostgreSQL pool's size.", () => pool().max);
    counter(
      "traitgate_db_pool_connection_failures_total",
      "PostgreSQL connections that failed, idle or in use.",
      () => pool().failedConnections,
    );
  }

  const { lastResort } = sources;
  if (lastResort !== undefined) {
    counter(
      "traitgate_last_resort_errors_total",
      "A connection's error that reached the process without a listener (a bug: the process served on).",
      () => lastResort.caught(),
    );
  }

  collectDefaultMetrics({ register: registry });
}
