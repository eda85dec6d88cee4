import { Code } from "@connectrpc/connect";
import { Counter, Histogram, type Registry } from "prom-client";
import type { AuditWriterObserver } from "../audit/writer.js";
import type { GatewayCallObservation } from "../gateway/gateway.js";
import type { CallRecord } from "../server/context.js";
import { codeName } from "../server/http-status.js";

/**
 * Traitgate's own instruments, on a registry passed in (never prom-client's global one):
 * each core, and each test, has its own. The domain never sees them: it reports through
 * the small observer functions below, which the core wires (src/platform.ts).
 *
 * No label carries user data: services and methods are the server's own (a path that is no
 * method gives "none"), codes and reasons are the code's own names, plugins and operations
 * are registered names (anything else is "unknown"). docs/operations.md lists every metric.
 */
export interface Metrics {
  readonly registry: Registry;
  /** A call has ended (its access line is written): counts it and its duration. */
  callEnded(call: CallRecord, code: number, seconds: number): void;
  /** A policy decision was answered (and recorded). */
  /** `count` decisions (default 1) answered with this decision and reason code. */
  policyDecision(decision: string, reason: string, count?: number): void;
  /** The audit writer committed (or failed to commit) one batch. */
  readonly audit: AuditWriterObserver;
  /** A gateway call ended. */
  gatewayCall(call: GatewayCallObservation): void;
}

/** Seconds, for request and commit latencies: 0.5 ms to 10 s. */
const latencyBuckets = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/** Events per audit batch: up to the writer's default maximum (512). */
const batchBuckets = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/** Refusals by the login throttle carry this reason (docs/identity.md, "Throttling"). */
const throttledReason = "TOO_MANY_ATTEMPTS";

export function createMetrics(registry: Registry): Metrics {
  const registers = [registry];
  const callLabels = ["service", "method", "protocol", "code"] as const;
  const requests = new Counter({
    name: "traitgate_rpc_requests_total",
    help: "Calls answered, by service, method, protocol and gRPC code.",
    labelNames: callLabels,
    registers,
  });
  const durations = new Histogram({
    name: "traitgate_rpc_request_duration_seconds",
    help: "Time from a call's arrival to the end of its answer, by service, method, protocol and gRPC code.",
    labelNames: callLabels,
    buckets: latencyBuckets,
    registers,
  });
  const throttled = new Counter({
    name: "traitgate_throttled_requests_total",
    help: "Calls refused by the login throttle (429 TOO_MANY_ATTEMPTS), by service and method.",
    labelNames: ["service", "method"] as const,
    registers,
  });
  const decisions = new Counter({
    name: "traitgate_policy_decisions_total",
    help: "Policy decisions answered, by decision and reason code.",
    labelNames: ["decision", "reason"] as const,
    registers,
  });
  const batchSize = new Histogram({
    name: "traitgate_audit_batch_events",
    help: "Events per audit batch (one transaction each).",
    buckets: batchBuckets,
    registers,
  });
  const commitLatency = new Histogram({
    name: "traitgate_audit_commit_duration_seconds",
    help: "Time to commit one audit batch, by outcome (ok, failed).",
    labelNames: ["outcome"] as const,
    buckets: latencyBuckets,
    registers,
  });
  const gatewayCalls = new Counter({
    name: "traitgate_gateway_calls_total",
    help: "Gateway calls, by target plugin, operation, outcome and reason.",
    labelNames: ["plugin", "operation", "outcome", "reason"] as const,
    registers,
  });
  const upstream = new Histogram({
    name: "traitgate_gateway_upstream_duration_seconds",
    help: "Time the plugin took to answer a forwarded call, by plugin and operation.",
    labelNames: ["plugin", "operation"] as const,
    buckets: latencyBuckets,
    registers,
  });

  // Each combination of labels is looked up once; later calls reuse its children.
  const callChildren = memo3((rpc: string | undefined, protocol: string, code: number) => {
    const slash = rpc?.indexOf("/") ?? -1;
    const service = rpc !== undefined && slash > 0 ? rpc.slice(0, slash) : "none";
    const method = rpc !== undefined && slash > 0 ? rpc.slice(slash + 1) : "none";
    const labels = { service, method, protocol, code: codeLabel(code) };
    return {
      count: requests.labels(labels),
      duration: durations.labels(labels),
      throttled: throttled.labels({ service, method }),
    };
  });
  const decisionChildren = memo3((decision: string, reason: string, _: undefined) =>
    decisions.labels({ decision, reason }),
  );
  const committed = {
    ok: commitLatency.labels({ outcome: "ok" }),
    failed: commitLatency.labels({ outcome: "failed" }),
  };

  return {
    registry,
    callEnded(call, code, seconds) {
      const children = callChildren(call.rpc, call.protocol, code);
      children.count.inc();
      children.duration.observe(seconds);
      if (code === Code.ResourceExhausted && call.reason === throttledReason) {
        children.throttled.inc();
      }
    },
    policyDecision(decision, reason, count = 1) {
      decisionChildren(decision, reason, undefined).inc(count);
    },
    audit: {
      batch(events, seconds, ok) {
        batchSize.observe(events);
        (ok ? committed.ok : committed.failed).observe(seconds);
      },
    },
    gatewayCall(call) {
      gatewayCalls.inc({
        plugin: call.plugin,
        operation: call.operation,
        outcome: call.outcome,
        reason: call.reason,
      });
      if (call.upstreamSeconds !== undefined) {
        upstream.observe({ plugin: call.plugin, operation: call.operation }, call.upstreamSeconds);
      }
    },
  };
}

/** A code's label: "ok", a Connect code name, or "unknown" for anything else. */
function codeLabel(code: number): string {
  if (code === 0) return "ok";
  return Number.isInteger(code) && code > 0 && code <= Code.Unauthenticated
    ? codeName(code as Code)
    : "unknown";
}

/** Memoizes by three keys in nested maps: nothing is allocated once a combination was seen. */
function memo3<A, B, C, V>(make: (a: A, b: B, c: C) => V): (a: A, b: B, c: C) => V {
  const root = new Map<A, Map<B, Map<C, V>>>();
  return (a, b, c) => {
    let byB = root.get(a);
    if (byB === undefined) {
      byB = new Map();
      root.set(a, byB);
    }
    let byC = byB.get(b);
    if (byC === undefined) {
      byC = new Map();
      byB.set(b, byC);
    }
    let value = byC.get(c);
    if (value === undefined) {
      value = make(a, b, c);
      byC.set(c, value);
    }
    return value;
  };
}
