import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { processCpuMs, processTreeCpuMs } from "../../bench/load.js";

/**
 * The benchmarks' CPU columns (bench/load.ts): a child that exits inside the measured window
 * keeps counting, through its parent's count of waited-for children, so a party's CPU per
 * call never goes down (a PostgreSQL backend that exits took its time out of the sum before:
 * one row read −165 µs per call).
 */

/** Runs a child that spins for `ms` of CPU time, then exits; resolves once it is waited for. */
function spinChild(ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [
      "-e",
      `const end = process.cpuUsage().user + ${ms * 1000}; while (process.cpuUsage().user < end) {}`,
    ]);
    child.once("error", reject);
    child.once("exit", () => resolve());
  });
}

describe("benchmark CPU sampling", () => {
  it("counts the CPU time of children that exited and were waited for", async () => {
    const alone = processCpuMs(process.pid);
    const withChildren = processCpuMs(process.pid, { reaped: true });
    const treeBefore = processTreeCpuMs(process.pid);
    await spinChild(300);
    // Without the children the parent's own count barely moves; with them it holds the spin.
    expect(processCpuMs(process.pid, { reaped: true }) - withChildren).toBeGreaterThanOrEqual(
      processCpuMs(process.pid) - alone + 250,
    );
    expect(processTreeCpuMs(process.pid) - treeBefore).toBeGreaterThanOrEqual(250);
  });
});
