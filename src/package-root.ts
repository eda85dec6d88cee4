import { existsSync } from "node:fs";
import { join } from "node:path";

/** The folder holding package.json (src/ under tsx, dist/src/ when built). */
export function packageRoot(): string {
  let dir = import.meta.dirname;
  while (!existsSync(join(dir, "package.json"))) {
    const parent = join(dir, "..");
    if (parent === dir) throw new Error("cannot find the package folder");
    dir = parent;
  }
  return dir;
}
