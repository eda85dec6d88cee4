import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Effect } from "@cerbos/api/cerbos/effect/v1/effect_pb";
import { CheckResourcesRequestSchema } from "@cerbos/api/cerbos/request/v1/request_pb";
import { CheckResourcesResponseSchema } from "@cerbos/api/cerbos/response/v1/response_pb";
import { GRPC } from "@cerbos/grpc";
import { grpcFrame, rawGrpcClient } from "../grpc-client.js";
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
 * roles. With `audit` (the default) its decision log is on as the issue asks: `audit.enabled`,
 * access and decision logs, and the `local` backend (its durable one, an embedded store in the
 * run's directory); without, off. Its telemetry is off (CERBOS_NO_TELEMETRY=1): otherwise it
 * tries to reach its vendor at every start.
 * Clients: `@cerbos/grpc` (what the issue names), and the benchmark's minimal gRPC client
 * (bench/grpc-client.ts) with requests encoded before the run, as Traitgate's are.
 */
export interface CerbosPeer {
  version: string;
  /** The PDP's process id (for its CPU time). */
  pid: number;
  /** One CheckResources call for request i: allowed? */
  unary(i: number): Promise<boolean>;
  /** One CheckResources call for requests of one user (its principal): allowed, each. */
  batch(indices: readonly number[]): Promise<boolean[]>;
  /** unary(i) over the minimal client, the request encoded beforehand. */
  rawUnary(i: number): Promise<boolean>;
  /** batch over the minimal client, the request encoded beforehand (call prepareBatches first). */
  rawBatch(b: number): Promise<boolean[]>;
  /** Encodes the batches that rawBatch(b) sends. */
  prepareBatches(groups: readonly (readonly number[])[]): void;
  /** The minimal client's calls from now on go over `n` connections in turn (1 at start). */
  rawConnections(n: number): void;
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

export async function startCerbos(
  w: Workload,
  options: { audit?: boolean } = {},
): Promise<CerbosPeer> {
  const audit = options.audit ?? true;
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
      audit: audit
        ? {
            enabled: true,
            accessLogsEnabled: true,
            decisionLogsEnabled: true,
            backend: "local",
            local: { storagePath: join(dir, "decisions") },
          }
        : { enabled: false },
    }),
  );
  const child: ChildProcess = spawn(
    binary.path,
    ["server", `--config=${config}`, "--log-level=error"],
    {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, CERBOS_NO_TELEMETRY: "1" },
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

  // The same requests, encoded once for the minimal client.
  const grpcUrl = `http://127.0.0.1:${grpcPort}`;
  let raw = rawGrpcClient(grpcUrl);
  const checkResources = "/cerbos.svc.v1.CerbosService/CheckResources";
  const encode = (indices: readonly number[], tag: string) => {
    const u = w.requests[indices[0]!]![0];
    return grpcFrame(
      toBinary(
        CheckResourcesRequestSchema,
        create(CheckResourcesRequestSchema, {
          requestId: tag,
          principal: { id: principals[u]!.id, roles: principals[u]!.roles },
          resources: indices.map((i, k) => {
            const [, cap, cls] = w.requests[i]!;
            return { resource: { kind: `d${cls}`, id: `x${k}` }, actions: [`c${cap}`] };
          }),
        }),
      ),
    );
  };
  const unaryFrames = w.requests.map((_, i) => encode([i], `u${i}`));
  let batchFrames: { frame: Buffer; actions: string[] }[] = [];
  const decide = async (frame: Buffer, actions: readonly string[]) => {
    const answer = fromBinary(CheckResourcesResponseSchema, await raw.call(checkResources, frame));
    return actions.map((action, k) => answer.results[k]?.actions[action] === Effect.ALLOW);
  };

  const stop = async () => {
    client.close();
    raw.close();
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
    pid: child.pid ?? -1,
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
    async rawUnary(i) {
      const [, cap] = w.requests[i]!;
      const [allowed] = await decide(unaryFrames[i]!, [`c${cap}`]);
      return allowed === true;
    },
    prepareBatches(groups) {
      batchFrames = groups.map((indices, b) => ({
        frame: encode(indices, `b${b}`),
        actions: indices.map((i) => `c${w.requests[i]![1]}`),
      }));
    },
    rawBatch(b) {
      const batch = batchFrames[b]!;
      return decide(batch.frame, batch.actions);
    },
    rawConnections(n) {
      raw.close();
      raw = rawGrpcClient(grpcUrl, { connections: n });
    },
    close: stop,
  };
}
