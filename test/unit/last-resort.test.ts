import { spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { installLastResortGuard, isPerConnectionError } from "../../src/server/last-resort.js";

/**
 * The last-resort guard: an error that is only one connection's (e.g. an outgoing request
 * destroyed with no `error` listener, the crash of issue 13) is logged without request data
 * and counted, and the process goes on; any other uncaught error still stops the process.
 * Exit behaviour is proven in a child process (test/support/last-resort-child.ts).
 */

const child = fileURLToPath(new URL("../support/last-resort-child.ts", import.meta.url));

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", child, ...args], {
      env: { PATH: process.env.PATH },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (c: Buffer) => {
      stdout += c;
    });
    proc.stderr.on("data", (c: Buffer) => {
      stderr += c;
    });
    proc.once("error", reject);
    proc.once("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const lines = (text: string) =>
  text
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe("the last-resort guard", () => {
  it("logs and counts a connection's uncaught error, without request data, and the process goes on", async () => {
    const { code, stdout, stderr } = await run([]);
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    const logged = lines(stdout);
    const warning = logged.find((l) => l.error_code === "ECONNRESET");
    expect(warning).toMatchObject({ level: "warn", origin: "uncaughtException", caught_total: 1 });
    expect(logged).toContainEqual({ caught: 1 });
    expect(stdout).not.toContain("SECRET-MARKER");
  });

  it("still stops the process on a programming error", async () => {
    const { code, stdout, stderr } = await run(["programming-error"]);
    expect(code).toBe(1);
    expect(stderr).toContain("TypeError: a programming error in the test child");
    // It had survived the connection's error first, and did not survive this one.
    expect(lines(stdout)).toContainEqual({ caught: 1 });
  });

  it("tells connection errors from programming errors by their code", () => {
    const withCode = (code: string) => Object.assign(new Error("x"), { code });
    for (const code of [
      "ECONNRESET",
      "EPIPE",
      "ERR_STREAM_PREMATURE_CLOSE",
      "ERR_HTTP2_STREAM_ERROR",
    ]) {
      expect(isPerConnectionError(withCode(code))).toBe(true);
    }
    for (const err of [
      new TypeError("x"),
      withCode("ERR_HTTP2_HEADERS_SENT"),
      withCode("ERR_INVALID_ARG_TYPE"),
      { code: "ECONNRESET" },
      "ECONNRESET",
    ]) {
      expect(isPerConnectionError(err)).toBe(false);
    }
  });

  it("stops listening when uninstalled", () => {
    const target = new EventEmitter();
    const guard = installLastResortGuard(silentLogger, target as unknown as NodeJS.Process);
    target.emit(
      "uncaughtException",
      Object.assign(new Error("x"), { code: "EPIPE" }),
      "uncaughtException",
    );
    expect(guard.caught()).toBe(1);
    guard.uninstall();
    expect(target.listenerCount("uncaughtException")).toBe(0);
  });
});
