import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { GRPC } from "@cerbos/grpc";
import { reachableRoles, type Workload } from "../policy-workload.js";

/**
 * The Cerbos PDP (npm `@cerbos/cerbos-linux-x64`, the server binary) on loopback, with the
 * workload written as one resource policy per data class (resource kind `d<n>`, action
 * `c<n>`). Cerbos combines per role: a principal with several roles is allowed when one of
 * its roles is allowed without a DENY *for that role*. The workload's deny wins whichever
 * role it names, so a deny rule is written for every role (`roles: ["*"]`) with the condition
 * that the principal holds the rule's role (`"r5" in P.roles`); allow rules name their role.
 * No match is DENY in both. Role inheritance is expanded by the caller: each
 * principal carries every role it reaches, as a policy enforcement point hands Cerbos its
 * roles. Its audit log is off (it has no durable decision log on the request path).
 * Clients: `@cerbos/grpc`.
 */
export interface CerbosPeer {
  version: string;
  /** One CheckResources call for request i: allowed? */
  unary(i: number): Promise<boolean>;
  /** One CheckResources call for requests of one user (its principal): allowed, each. */
  batch(indices: readonly number[]): Promise<boolean[]>;
  close(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function cerbosBinary(): { path: string; version: string } {
  const require = createRequire(import.meta.url);
  const manifest = require.resolve("@cerbos/cerbos-linux-x64/package.json");
  const { version } = require("@cerbos/cerbos-linux-x64/package.json") as { version: string };
  return { path: join(dirname(manifest), "cerbos-linux-x64"), version };
}

export async function startCerbos(w: Workload): Promise<CerbosPeer> {
  const binary = cerbosBinary();
  const dir = mkdtempSync(join(tmpdir(), "traitgate-bench-cerbos-"));
  const policies = join(dir, "policies");
  type CerbosRule = {
    actions: string[];
    effect: string;
    roles: string[];
    condition?: { match: { expr: string } };
  };
  const byClass = new Map<string, CerbosRule[]>();
  for (const rule of w.doc.rules) {
    const [role, cap, cls] = rule.when.all!.map((t) => t.slice(t.indexOf(":") + 1));
    const rules = byClass.get(cls!) ?? [];
    rules.push(
      rule.decision === "deny"
        ? {
            actions: [cap!],
            effect: "EFFECT_DENY",
            roles: ["*"],
            condition: { match: { expr: `"${role}" in P.roles` } },
          }
        : { actions: [cap!], effect: "EFFECT_ALLOW", roles: [role!] },
    );
    byClass.set(cls!, rules);
  }
  mkdirSync(policies);
  for (const [cls, rules] of byClass) {
    // YAML is a superset of JSON: Cerbos reads these as policy files.
    writeFileSync(
      join(policies, `${cls}.yaml`),
      JSON.stringify({
        apiVersion: "api.cerbos.dev/v1",
        resourcePolicy: { version: "default", resource: cls, rules },
      }),
    );
  }
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const config = join(dir, "config.yaml");
  writeFileSync(
    config,
    JSON.stringify({
      server: {
        grpcListenAddr: `127.0.0.1:${grpcPort}`,
        httpListenAddr: `127.0.0.1:${httpPort}`,
      },
      storage: { driver: "disk", disk: { directory: policies, watchForChanges: false } },
      audit: { enabled: false },
    }),
  );
  const child: ChildProcess = spawn(
    binary.path,
    ["server", `--config=${config}`, "--log-level=error"],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const client = new GRPC(`127.0.0.1:${grpcPort}`, { tls: false });

  const principals = w.users.map((roles, u) => ({
    id: `u${u}`,
    roles: reachableRoles(roles).map((r) => `r${r}`),
  }));
  const unary = (i: number) => {
    const [u, cap, cls] = w.requests[i]!;
    return client.isAllowed({
      principal: principals[u]!,
      resource: { kind: `d${cls}`, id: "x" },
      action: `c${cap}`,
    });
  };

  const stop = async () => {
    client.close();
    child.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 3_000))]);
    if (child.exitCode === null) child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };

  // Ready when it answers (the binary compiles the policies at start).
  const deadline = performance.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`cerbos exited (${child.exitCode}): ${stderr}`);
    }
    try {
      await unary(0);
      break;
    } catch (err) {
      if (performance.now() > deadline) {
        await stop();
        throw new Error(`cerbos did not answer within 30 s: ${(err as Error).message} ${stderr}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  return {
    version: binary.version,
    unary,
    async batch(indices) {
      const u = w.requests[indices[0]!]![0];
      const resources = indices.map((i, k) => {
        const [, cap, cls] = w.requests[i]!;
        return { resource: { kind: `d${cls}`, id: `x${k}` }, actions: [`c${cap}`] };
      });
      const response = await client.checkResources({ principal: principals[u]!, resources });
      return indices.map((i, k) => {
        const [, cap, cls] = w.requests[i]!;
        return (
          response.isAllowed({ resource: { kind: `d${cls}`, id: `x${k}` }, action: `c${cap}` }) ===
          true
        );
      });
    },
    close: stop,
  };
}
