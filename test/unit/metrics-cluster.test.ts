import { Counter, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import {
  aggregatePeerMetrics,
  type RegistryJson,
  type RegistryPeer,
} from "../../src/metrics/cluster.js";
import { parseExposition, sampleValue } from "../support/prometheus.js";

/**
 * The primary's side of `/metrics` under `serve --workers` (src/metrics/cluster.ts): the
 * registries of the workers that answer in time are summed; one that does not answer, fails or
 * is dead is left out, counted in `traitgate_metrics_workers{state="missing"}` and logged; with
 * no answer at all the scrape fails. The workers here are stand-ins; test/e2e/serve-workers
 * freezes a real one.
 */

/** A worker's registry with `calls` counted. */
async function registryWith(calls: number): Promise<RegistryJson> {
  const registry = new Registry();
  new Counter({ name: "calls_total", help: "calls", registers: [registry] }).inc(calls);
  return registry.getMetricsAsJSON();
}

const answering = (slot: number, calls: number): RegistryPeer => ({
  slot,
  pid: 1000 + slot,
  registry: () => registryWith(calls),
});

/** A stuck worker: never answers; records whether the primary said it stopped waiting. */
const stuck = (slot: number) => {
  const seen: { signal?: AbortSignal } = {};
  const peer: RegistryPeer = {
    slot,
    pid: 1000 + slot,
    registry: (signal) => {
      seen.signal = signal;
      return new Promise<RegistryJson>(() => {});
    },
  };
  return { peer, seen };
};

function logged() {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({
    level: "debug",
    destination: { write: (l: string) => lines.push(JSON.parse(l) as Record<string, unknown>) },
  });
  return { log, lines };
}

const gauge = (text: string, state: string) =>
  sampleValue(parseExposition(text), "traitgate_metrics_workers", { state });

describe("the workers' metrics, aggregated by the primary", () => {
  it("every worker answers: their sum, all answered", async () => {
    const { log, lines } = logged();
    const text = await aggregatePeerMetrics([answering(1, 3), answering(2, 4)], {
      expected: 2,
      withinMs: 1_000,
      log,
    });
    expect(sampleValue(parseExposition(text), "calls_total")).toBe(7);
    expect(gauge(text, "answered")).toBe(2);
    expect(gauge(text, "missing")).toBe(0);
    expect(text).toContain("# TYPE traitgate_metrics_workers gauge");
    expect(lines).toEqual([]);
  });

  it("a stuck worker: the others' sum once the bound is past, it counted missing and logged", async () => {
    const { log, lines } = logged();
    const frozen = stuck(2);
    const started = performance.now();
    const text = await aggregatePeerMetrics([answering(1, 3), frozen.peer, answering(3, 5)], {
      expected: 3,
      withinMs: 100,
      log,
    });
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(90);
    expect(ms).toBeLessThan(2_000);
    expect(sampleValue(parseExposition(text), "calls_total")).toBe(8);
    expect(gauge(text, "answered")).toBe(2);
    expect(gauge(text, "missing")).toBe(1);
    // The primary no longer waits: a real worker's request is dropped (no leak per scrape).
    expect(frozen.seen.signal?.aborted).toBe(true);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "warn",
      msg: "a worker did not answer for the metrics: this scrape leaves it out",
      worker: 2,
      worker_pid: 1002,
      reason: "no answer within 100 ms",
    });
  });

  it("answers as soon as every worker has, not at the bound", async () => {
    const { log } = logged();
    const started = performance.now();
    await aggregatePeerMetrics([answering(1, 1)], { expected: 1, withinMs: 10_000, log });
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it("a worker that fails, or exits, is missing with its reason", async () => {
    const { log, lines } = logged();
    const failing: RegistryPeer = {
      slot: 2,
      pid: 1002,
      registry: () => Promise.reject(new Error("the worker exited")),
    };
    const text = await aggregatePeerMetrics([answering(1, 3), failing], {
      expected: 2,
      withinMs: 1_000,
      log,
    });
    expect(gauge(text, "answered")).toBe(1);
    expect(gauge(text, "missing")).toBe(1);
    expect(lines[0]).toMatchObject({ worker: 2, reason: "the worker exited" });
  });

  it("a dead worker not asked (waiting to be started again) is missing too", async () => {
    const { log } = logged();
    const text = await aggregatePeerMetrics([answering(1, 3)], { expected: 2, withinMs: 100, log });
    expect(gauge(text, "answered")).toBe(1);
    expect(gauge(text, "missing")).toBe(1);
  });

  it("no worker answers: the scrape fails", async () => {
    const { log, lines } = logged();
    await expect(
      aggregatePeerMetrics([stuck(1).peer, stuck(2).peer], { expected: 2, withinMs: 50, log }),
    ).rejects.toThrow("no worker answered within 50 ms (2 asked)");
    expect(lines.map((l) => l.worker)).toEqual([1, 2]);
    await expect(aggregatePeerMetrics([], { expected: 2, withinMs: 50, log })).rejects.toThrow(
      "no worker answered",
    );
  });
});
