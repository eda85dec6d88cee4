import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { lockDataDir, lockFileName } from "../../src/storage/dir-lock.js";
import { DataDirLockedError, openDatabase } from "../../src/storage/index.js";

/**
 * The embedded database is one process's at a time (issue 13, item 8): a second open of a
 * data directory in use fails at once, naming the holder's pid, and never opens PGlite on it.
 */

const roots: string[] = [];
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  for (const root of roots) await rm(root, { recursive: true, force: true });
});

async function tempDataDir(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "tg-lock-"));
  roots.push(root);
  return join(root, "pglite");
}

/** A separate process holding the database in `dataDir`, once it says it is open. */
function holder(dataDir: string, mode = "open"): Promise<ChildProcess> {
  const script = fileURLToPath(new URL("./hold-child.ts", import.meta.url));
  const child = spawn(process.execPath, ["--import", "tsx", script], {
    env: { ...process.env, HOLD_DIR: dataDir, HOLD_MODE: mode },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let output = "";
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("open")) resolve(child);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => reject(new Error(`holder exited with ${code}: ${output}`)));
  });
}

describe("the embedded database's data directory lock", () => {
  it("refuses a second open while another process holds it, naming its pid; a crashed holder's lock is taken over", async () => {
    const dataDir = await tempDataDir();
    const child = await holder(dataDir);
    await expect(openDatabase({ dataDir, log: silentLogger })).rejects.toThrow(
      new RegExp(`in use by process ${child.pid}\\b`),
    );
    // Killed without a chance to clean up: its lock names a dead pid, which is stale.
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
    const db = await openDatabase({ dataDir, log: silentLogger });
    expect((await db.query("select 1 as one")).rows).toEqual([{ one: 1 }]);
    await db.close();
  });

  it("refuses a second open in the same process, and opens again once the first is closed", async () => {
    const dataDir = await tempDataDir();
    const first = await openDatabase({ dataDir, log: silentLogger });
    await expect(openDatabase({ dataDir, log: silentLogger })).rejects.toThrow(
      new RegExp(`in use by process ${process.pid}\\b`),
    );
    await first.close();
    const second = await openDatabase({ dataDir, log: silentLogger });
    await second.close();
  });
});

describe("lockDataDir", () => {
  async function lockedDir(holder: Record<string, unknown> | string) {
    const dir = await tempDataDir();
    await mkdir(dir, { recursive: true });
    const text = typeof holder === "string" ? holder : JSON.stringify(holder);
    writeFileSync(join(dir, lockFileName), text);
    return dir;
  }
  const base = { since: "2026-01-01T00:00:00.000Z", nonce: "earlier" };

  it("writes who holds it, and release removes the file only while it is this lock's", async () => {
    const dir = await tempDataDir();
    await mkdir(dir, { recursive: true });
    const lock = lockDataDir(dir);
    const written = JSON.parse(readFileSync(lock.file, "utf8")) as Record<string, unknown>;
    expect(written).toMatchObject({ pid: process.pid, hostname: hostname() });
    lock.release();
    expect(existsSync(lock.file)).toBe(false);
    // A lock released, then taken by someone else: a second release leaves theirs alone.
    const again = lockDataDir(dir);
    lock.release();
    expect(existsSync(again.file)).toBe(true);
    again.release();
  });

  it("is released by a process that exits without closing", async () => {
    const dir = await tempDataDir();
    const child = holder(dir, "exit");
    await expect(child).rejects.toThrow(/exited with 3/);
    expect(existsSync(join(dir, lockFileName))).toBe(false);
  });

  it("is not taken from a running process, nor from another host, nor when unreadable", async () => {
    const running = await lockedDir({ ...base, pid: process.ppid, hostname: hostname() });
    expect(() => lockDataDir(running)).toThrow(`in use by process ${process.ppid} (since`);
    const remote = await lockedDir({ ...base, pid: 999_999_999, hostname: "elsewhere" });
    expect(() => lockDataDir(remote)).toThrow(/in use by process 999999999 on host elsewhere/);
    const garbage = await lockedDir("{not json");
    expect(() => lockDataDir(garbage)).toThrow(DataDirLockedError);
    expect(() => lockDataDir(garbage)).toThrow(/does not say who holds it/);
  });

  it.each([
    ["whose pid no longer runs", { pid: 999_999_999 }],
    ["whose pid is this process's (a restarted container) but not held here", { pid: process.pid }],
    [
      "whose pid runs a process started at another time (a reused pid)",
      { pid: process.ppid, procStart: "1" },
    ],
  ])("takes over a lock %s", async (_, holderFields) => {
    const dir = await lockedDir({ ...base, hostname: hostname(), ...holderFields });
    const lock = lockDataDir(dir);
    expect(JSON.parse(readFileSync(lock.file, "utf8"))).toMatchObject({ pid: process.pid });
    lock.release();
  });
});
