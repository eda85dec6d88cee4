/**
 * Run by data-dir-lock.test.ts as a separate process: opens the embedded database in
 * HOLD_DIR, prints "open" and keeps it open until killed. With HOLD_MODE=exit, it takes the
 * directory's lock alone and exits (code 3) without releasing it.
 */
import { mkdirSync } from "node:fs";
import { silentLogger } from "../../src/log.js";
import { lockDataDir } from "../../src/storage/dir-lock.js";
import { openDatabase } from "../../src/storage/index.js";

const dataDir = process.env.HOLD_DIR;
if (!dataDir) throw new Error("HOLD_DIR must be set");
if (process.env.HOLD_MODE === "exit") {
  mkdirSync(dataDir, { recursive: true });
  lockDataDir(dataDir);
  process.exit(3);
}
const db = await openDatabase({ dataDir, log: silentLogger });
await db.query("select 1");
process.stdout.write("open\n");
setInterval(() => {}, 60_000);
