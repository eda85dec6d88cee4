import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

/**
 * An interrupted benchmark (bench/interrupt.ts) undoes what it registered and stops the
 * children it started (bench/children.ts), then exits as the signal would have ended it; an
 * undo its benchmark already withdrew does not run. A real process, a real signal.
 */

const root = new URL("../..", import.meta.url).pathname;
let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/**
 * The benchmark: an undo kept, one withdrawn, a temporary directory, a child that notes its SIGTERM or SIGINT; "ready" once set.
 * Both leave by themselves after 20 s, so a failing test leaves no process behind.
 */
function benchmarkProcess(out: string) {
  // As the benchmarks' servers do: SIGINT (Ctrl-C reaches the whole group) like SIGTERM.
  const child = `const stop = () => { require("node:fs").writeFileSync(${JSON.stringify(join(out, "child"))}, "stopped"); process.exit(0); }; process.on("SIGTERM", stop); process.on("SIGINT", stop); console.log("child up"); setTimeout(() => process.exit(0), 20_000);`;
  const script = `
    import { writeFileSync } from "node:fs";
    import { onInterrupt, temporaryDir } from "./bench/interrupt.ts";
    import { startChild } from "./bench/children.ts";
    onInterrupt(async () => writeFileSync(${JSON.stringify(join(out, "kept"))}, "undone"));
    const withdrawn = onInterrupt(() => writeFileSync(${JSON.stringify(join(out, "withdrawn"))}, "undone"));
    withdrawn();
    writeFileSync(${JSON.stringify(join(out, "tmp"))}, temporaryDir("traitgate-bench-interrupt-tmp-").dir);
    await startChild(process.execPath, ["-e", ${JSON.stringify(child)}], process.env, /child up/);
    console.log("ready");
    setTimeout(() => process.exit(0), 20_000);
  `;
  return spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
    // A process group of its own, so that a signal can reach the whole group as Ctrl-C does.
    detached: true,
  });
}

describe("an interrupted benchmark", () => {
  it.each([
    ["SIGTERM", 143, "the benchmark"],
    ["SIGINT", 130, "the benchmark"],
    ["SIGINT", 130, "its whole process group, as Ctrl-C"],
  ] as const)(
    "undoes what it made on %s and exits with %i (sent to %s)",
    async (signal, code, to) => {
      dir = mkdtempSync(join(tmpdir(), "traitgate-bench-interrupt-"));
      const out = dir;
      const bench = benchmarkProcess(out);
      let stderr = "";
      bench.stderr?.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      await new Promise<void>((resolve, reject) => {
        let stdout = "";
        bench.stdout?.on("data", (chunk: Buffer) => {
          stdout += chunk.toString();
          if (stdout.includes("ready")) resolve();
        });
        bench.once("exit", (c) => reject(new Error(`exited with ${c} before ready: ${stderr}`)));
      });
      const exited = new Promise<number | null>((resolve) => bench.once("exit", resolve));
      if (to === "the benchmark") bench.kill(signal);
      else process.kill(-(bench.pid as number), signal);
      expect(await exited).toBe(code);
      expect(readFileSync(join(out, "kept"), "utf8")).toBe("undone");
      expect(readFileSync(join(out, "child"), "utf8")).toBe("stopped");
      expect(existsSync(join(out, "withdrawn"))).toBe(false);
      expect(existsSync(readFileSync(join(out, "tmp"), "utf8"))).toBe(false);
      expect(stderr).toContain(`benchmark interrupted (${signal})`);
    },
    30_000,
  );
});
