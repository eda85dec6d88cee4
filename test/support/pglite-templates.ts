import { cpSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { PGlite } from "@electric-sql/pglite";
import { vector } from "@electric-sql/pglite-pgvector";
import { silentLogger } from "../../src/log.js";
import { migrate } from "../../src/storage/index.js";
import { openPglite } from "../../src/storage/pglite.js";

/**
 * Dumps of PGlite data directories the test databases start from: a fresh one (initdb costs
 * ~1.8 s of CPU per PGlite, loading a dump ~0.5 s) and one every migration has run on. The
 * suite's global setup makes both once per run (test/support/build-cli.ts); a test process
 * started some other way makes them itself.
 */
export type TemplateKind = "fresh" | "migrated";

const dir = fileURLToPath(new URL("../../dist/test-build", import.meta.url));
const fileOf = (kind: TemplateKind) => join(dir, `pglite-${kind}.tar`);

export async function buildTemplates(): Promise<void> {
  const fresh = await makeFresh();
  await writeFile(fileOf("fresh"), Buffer.from(await fresh.arrayBuffer()));
  const migrated = await makeMigrated(fresh, dataDirTemplate);
  await writeFile(fileOf("migrated"), Buffer.from(await migrated.arrayBuffer()));
}

/**
 * A migrated PGlite data directory on disk, for the command line's processes: a DATA_DIR
 * seeded from it skips PostgreSQL's initdb (about 3 s of CPU per fresh directory).
 */
const dataDirTemplate = join(dir, "pglite-datadir");

/**
 * Fills `dataDir` (new or empty) with a migrated embedded database, as if a command had run
 * there before; a suite testing a first start uses an empty directory instead. Without the
 * global setup's template (a test process started some other way) it leaves `dataDir` empty.
 */
export function seedDataDir(dataDir: string): string {
  if (existsSync(dataDirTemplate)) cpSync(dataDirTemplate, dataDir, { recursive: true });
  return dataDir;
}

const loaded = new Map<TemplateKind, Promise<Blob>>();

/** The dump of `kind`: from the global setup's file, else made here (once per process). */
export function template(kind: TemplateKind): Promise<Blob> {
  let blob = loaded.get(kind);
  if (blob === undefined) {
    const file = fileOf(kind);
    blob = existsSync(file)
      ? readFile(file).then((b) => new Blob([b]))
      : kind === "fresh"
        ? makeFresh()
        : template("fresh").then(makeMigrated);
    loaded.set(kind, blob);
  }
  return blob;
}

async function makeFresh(): Promise<Blob> {
  const pglite = await PGlite.create({ dataDir: "memory://" });
  try {
    return await pglite.dumpDataDir("none");
  } finally {
    await pglite.close();
  }
}

/** Migrated in a directory on disk, then dumped from it (and the directory kept at `keepAt`). */
async function makeMigrated(fresh: Blob, keepAt?: string): Promise<Blob> {
  const work = mkdtempSync(join(tmpdir(), "traitgate-template-"));
  try {
    const db = await openPglite({ dataDir: work, template: fresh, log: silentLogger });
    try {
      await migrate(db, silentLogger);
    } finally {
      await db.close();
    }
    const pglite = await PGlite.create({ dataDir: work, extensions: { vector } });
    let dump: Blob;
    try {
      dump = await pglite.dumpDataDir("none");
    } finally {
      await pglite.close();
    }
    if (keepAt !== undefined) cpSync(work, keepAt, { recursive: true });
    return dump;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
