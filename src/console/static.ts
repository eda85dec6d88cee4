import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { NodeResponse } from "../server/app.js";
import { securityHeaders } from "./http.js";

/** The package's root: the folder of its package.json, from src/console or dist/src/console. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("package.json not found above the console's code");
    dir = up;
  }
  return dir;
}

/** Where `npm run build` puts the console's bundle (scripts/build-console.mjs). */
export const defaultAssetsDir = () => join(packageRoot(), "dist", "console");

const types: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
};

const assetName = /^[a-z0-9-]+\.(js|css|svg)$/;

/**
 * The console's static files: `/console/assets/<name>` and, for every other page path, the
 * one HTML page (the browser's router shows the page). A missing bundle is a clear 503.
 */
export function createStaticFiles(dir: string) {
  async function send(res: NodeResponse, file: string, type: string): Promise<void> {
    let body: Buffer;
    try {
      body = await readFile(join(dir, file));
    } catch {
      res.writeHead(503, { ...securityHeaders, "content-type": "text/plain; charset=utf-8" });
      res.end("The console is not built: run `npm run build`.\n");
      return;
    }
    res.writeHead(200, {
      ...securityHeaders,
      "content-type": type,
      "content-length": String(body.length),
      // Revalidate each time: a new build is picked up at once.
      "cache-control": "no-cache",
    });
    res.end(body);
  }

  return async (res: NodeResponse, path: string): Promise<void> => {
    if (path.startsWith("/console/assets/")) {
      const name = path.slice("/console/assets/".length);
      const ext = name.slice(name.lastIndexOf("."));
      if (!assetName.test(name) || types[ext] === undefined) {
        res.writeHead(404, { ...securityHeaders, "content-type": "text/plain; charset=utf-8" });
        res.end("not found\n");
        return;
      }
      await send(res, name, types[ext]);
      return;
    }
    await send(res, "index.html", types[".html"] as string);
  };
}
