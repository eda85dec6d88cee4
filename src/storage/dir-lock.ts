import { randomBytes } from "node:crypto";
import {
  closeSync,
  linkSync,
  openSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";

/**
 * One process at a time in an embedded database's directory (PGlite is a single-user
 * PostgreSQL: two processes on one directory lose each other's writes). The lock is a file,
 * `traitgate.lock`, created with O_EXCL (atomic: of two processes, one creates it) holding who
 * holds it. It is removed on close and, if the process exits without closing, by an exit
 * hook; a process killed outright leaves it behind, and the next one finds it stale: same
 * host, and its pid no longer runs (or runs a process started at another time, a reused pid).
 * A lock written on another host cannot be checked from here and is never taken over.
 */

export const lockFileName = "traitgate.lock";

export interface LockHolder {
  pid: number;
  hostname: string;
  /** ISO time the lock was taken. */
  since: string;
  /** The holder's start time in clock ticks since boot (/proc/PID/stat), where there is one. */
  procStart?: string | undefined;
  /** Tells this process's own lock from an older one that names the same pid. */
  nonce: string;
}

export class DataDirLockedError extends Error {
  override readonly name = "DataDirLockedError";
  constructor(
    readonly dir: string,
    readonly lockFile: string,
    readonly holder: LockHolder | undefined,
  ) {
    super(
      holder
        ? `the embedded database in ${dir} is in use by process ${holder.pid}` +
            `${holder.hostname === hostname() ? "" : ` on host ${holder.hostname}`} (since ${holder.since}); ` +
            `only one process may open it: stop that one first, or use PostgreSQL (DB_CONNECTION). ` +
            `If no such process runs, remove ${lockFile}`
        : `the embedded database in ${dir} is locked by ${lockFile}, which does not say who holds it; ` +
            "if no traitgate process uses this directory, remove that file",
    );
  }
}

export interface DirLock {
  readonly file: string;
  /** Removes the lock file if it is still this lock's; idempotent. */
  release(): void;
}

/** Locks this process holds, released by the exit hook if their holders never close. */
const held = new Map<string, string>();
let exitHookInstalled = false;

/** Takes the lock on `dir` (which must exist) or throws DataDirLockedError naming its holder. */
export function lockDataDir(dir: string): DirLock {
  const file = join(dir, lockFileName);
  const me: LockHolder = {
    pid: process.pid,
    hostname: hostname(),
    since: new Date().toISOString(),
    procStart: procStartOf(process.pid),
    nonce: randomBytes(12).toString("hex"),
  };
  const text = `${JSON.stringify(me)}\n`;
  // Two rounds: a stale lock found in the first is moved aside and the creation tried again.
  for (let attempt = 0; attempt < 2; attempt++) {
    if (tryCreate(file, text)) {
      held.set(file, me.nonce);
      installExitHook();
      return {
        file,
        release() {
          if (held.get(file) !== me.nonce) return;
          held.delete(file);
          removeIfOurs(file, me.nonce);
        },
      };
    }
    const found = readHolder(file);
    if (found === "gone") continue;
    if (found === undefined || !isStale(found)) throw new DataDirLockedError(dir, file, found);
    takeOverStale(file, found);
  }
  throw new DataDirLockedError(dir, file, asHolder(readHolder(file)));
}

function tryCreate(file: string, text: string): boolean {
  let fd: number;
  try {
    fd = openSync(file, "wx", 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
  return true;
}

/** The lock's holder; "gone" when the file vanished meanwhile; undefined when unreadable. */
function readHolder(file: string): LockHolder | "gone" | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "gone";
    throw err;
  }
  try {
    const value = JSON.parse(text) as Partial<LockHolder>;
    if (!Number.isInteger(value.pid) || typeof value.nonce !== "string") return undefined;
    return {
      pid: value.pid as number,
      hostname: String(value.hostname ?? ""),
      since: String(value.since ?? ""),
      procStart: typeof value.procStart === "string" ? value.procStart : undefined,
      nonce: value.nonce,
    };
  } catch {
    // Being written this very moment (created, not yet filled) or damaged: not taken over.
    return undefined;
  }
}

const asHolder = (found: LockHolder | "gone" | undefined) => (found === "gone" ? undefined : found);

/** Whether a lock may be taken over: written on this host by a process that is gone. */
function isStale(holder: LockHolder): boolean {
  if (holder.hostname !== hostname()) return false;
  if ([...held.values()].includes(holder.nonce)) return false; // this process holds it
  if (holder.pid === process.pid) return true; // an earlier process with our pid (containers)
  if (!isRunning(holder.pid)) return true;
  // The pid runs: the same process only if it started when the holder did.
  const start = procStartOf(holder.pid);
  return holder.procStart !== undefined && start !== undefined && start !== holder.procStart;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM"; // runs, as another user
  }
}

/** A process's start time (field 22 of /proc/PID/stat); undefined where there is no /proc. */
function procStartOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces and parentheses) start at field 3.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/**
 * Moves the stale lock aside (rename is atomic: of two processes taking it over, one moves
 * it) and checks that what was moved is the stale lock, not one a faster process just took;
 * if it is not, it is put back.
 */
function takeOverStale(file: string, stale: LockHolder): void {
  const aside = `${file}.stale-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    renameSync(file, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  const moved = readHolder(aside);
  if (moved !== "gone" && moved?.nonce !== stale.nonce) {
    try {
      linkSync(aside, file);
    } catch {
      // Someone took the lock meanwhile: theirs stands, the next round reports it.
    }
  }
  unlinkSync(aside);
}

function removeIfOurs(file: string, nonce: string): void {
  const found = readHolder(file);
  if (found === "gone" || found?.nonce !== nonce) return;
  try {
    unlinkSync(file);
  } catch {
    // Already gone.
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const [file, nonce] of held) removeIfOurs(file, nonce);
    held.clear();
  });
}
