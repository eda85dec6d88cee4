import { randomBytes } from "node:crypto";
import { Agent, request } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import pg from "pg";
import { CallRequestSchema } from "../gen/traitgate/gateway/v1/gateway_pb.js";
import { type Child, freePort, postJson, startChild, stopChild } from "./children.js";
import { grpcFrame, rawGrpcClient } from "./grpc-client.js";
import { temporaryDir } from "./interrupt.js";
import {
  type CpuSampler,
  commandCpuMs,
  formatResults,
  type LoadResult,
  processCpuMs,
  runLoad,
} from "./load.js";

/**
 * The operator lane's hop (issue 6): rag_query-sized calls (about 2 KB of JSON in, 8 KB
 * out) to examples/echo-plugin, at 1 and 64 in flight, in one run:
 * - direct: HTTP/1.1 keep-alive to the plugin with its core secret;
 * - nginx (bench/nginx.sh: Debian package, keep-alive upstream pool) in front of it;
 * - the Traitgate gateway over REST (`POST /gateway/echo/rag_query`, HTTP/1.1 keep-alive)
 *   and over gRPC (one h2c session), as the service account `ai-core`: authentication,
 *   allowlist, policy, the `operator_call` audit event and the forward all happen.
 * Every party is its own process: the core (bench/gateway-core.ts, `startCore` on PGlite in
 * a temporary DATA_DIR, or PostgreSQL in a schema of its own), the plugin, nginx; the load
 * generator (a closed loop) is this process.
 */

const here = import.meta.dirname;
const root = join(here, "../..");
const echoScript = join(root, "examples/echo-plugin/server.mjs");
const nginxScript = join(root, "bench/nginx.sh");

/** A rag_query as core search sends it: a 2 KB question, 5 answers of 1500 characters. */
const payload = {
  q: "What does the operator lane forward? ".repeat(56).slice(0, 2048),
  top_k: 5,
  content_bytes: 1500,
};
const payloadJson = JSON.stringify(payload);
const gatewayJson = JSON.stringify({ caller_plugin: "ai-core", payload });

/** A keep-alive HTTP/1.1 JSON poster with `concurrency` sockets; resolves with the body. */
function poster(port: number, concurrency: number) {
  const agent = new Agent({
    keepAlive: true,
    maxSockets: concurrency,
    maxFreeSockets: concurrency,
  });
  const post = (path: string, body: string, headers: Record<string, string>) =>
    new Promise<Buffer>((resolve, reject) => {
      const req = request(
        {
          host: "127.0.0.1",
          port,
          path,
          agent,
          method: "POST",
          headers: {
            "content-type": "application/json",
            "content-length": String(Buffer.byteLength(body)),
            ...headers,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.once("end", () => {
            const all = Buffer.concat(chunks);
            if (res.statusCode === 200) resolve(all);
            else reject(new Error(`${res.statusCode} ${all.toString().slice(0, 300)}`));
          });
          res.once("error", reject);
        },
      );
      req.once("error", reject);
      req.end(body);
    });
  return { post, close: () => agent.destroy() };
}

/** GatewayService.Call over the minimal gRPC client, the request framed once. */
function grpcCaller(url: string) {
  const client = rawGrpcClient(url);
  const frame = grpcFrame(
    toBinary(
      CallRequestSchema,
      create(CallRequestSchema, {
        pluginId: "echo",
        operation: "rag_query",
        callerPlugin: "ai-core",
        payload,
      }),
    ),
  );
  const call = async (token: string) => {
    const answer = await client.call("/traitgate.gateway.v1.GatewayService/Call", frame, {
      authorization: `Bearer ${token}`,
    });
    return answer.length;
  };
  return { call, close: () => client.close() };
}

/** Checks that a reply is the plugin's rag_query answer (5 items of 1500 characters). */
function checkReply(body: Buffer, label: string): void {
  const reply = JSON.parse(body.toString()) as { items?: { content?: string }[] };
  if (reply.items?.length !== 5 || reply.items[0]?.content?.length !== 1500) {
    throw new Error(`${label}: unexpected reply ${body.toString().slice(0, 200)}`);
  }
}

interface Setup {
  /** CPU time (ms) so far of each party: load generator, core, plugin, nginx, PostgreSQL. */
  cpu: CpuSampler;
  /** Runs the in-process scenario in the core (SIGUSR2) and returns its results. */
  inProcess(): Promise<LoadResult[]>;
  coreUrl: string;
  corePort: number;
  aiCoreToken: string;
  coreSecret: string;
  pluginPort: number;
  /** The bare Node.js proxy (bench/node-proxy.ts) in front of the same plugin. */
  nodeProxyPort: number;
  nginxPort: number | undefined;
  nginxNote: string;
  stop(): Promise<void>;
}

async function setUp(pgUrl: string | undefined, seconds: number): Promise<Setup> {
  const { dir, remove: removeDir } = temporaryDir("traitgate-bench-gateway-");
  const children: Child[] = [];
  const stop = async () => {
    for (const c of children.reverse()) await stopChild(c);
    removeDir();
  };
  try {
    const coreArgs = (process.env.BENCH_CORE_NODE_ARGS ?? "").split(" ").filter(Boolean);
    const core = await startChild(
      process.execPath,
      [...coreArgs, join(here, "gateway-core.js")],
      {
        PATH: process.env.PATH,
        DATA_DIR: join(dir, "data"),
        JWT_SECRET: randomBytes(32).toString("base64url"),
        DATA_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: "info",
        SERVICE_TOKEN_TTL_SECONDS: "3600",
        BENCH_PAYLOAD: JSON.stringify(payload),
        BENCH_SECONDS: String(seconds),
        ...(pgUrl ? { BENCH_PG_URL: pgUrl } : {}),
        ...(process.env.BENCH_COUNT_QUERIES
          ? { BENCH_COUNT_QUERIES: process.env.BENCH_COUNT_QUERIES }
          : {}),
      },
      /(\{"benchCore":true[^\n]*\})\n/,
    );
    children.push(core);
    const info = JSON.parse(core.match?.[1] ?? "{}") as {
      url: string;
      password: string;
      apiKey: string;
    };
    const url = info.url;
    const login = await postJson(
      url,
      "/auth/login",
      { username: "bench-admin", password: info.password },
      {},
    );
    const admin = { authorization: `Bearer ${login.token as string}`, "x-api-key": info.apiKey };
    const sa = await postJson(
      url,
      "/api/admin/service-accounts",
      { name: "ai-core", roles: ["service"] },
      admin,
    );
    const token = await postJson(
      url,
      "/auth/token",
      { grant_type: "client_credentials", client_id: "ai-core", client_secret: sa.client_secret },
      {},
    );
    const manifest = {
      name: "Echo",
      plugin_type: "internal",
      endpoints: { rag_index: "/rag/index", rag_query: "/rag/query" },
    };
    const registered = await postJson(url, "/admin/plugins", { id: "echo", ...manifest }, admin);
    const coreSecret = (registered.credentials as { core_secret: string }).core_secret;
    const plugin = await startChild(
      process.execPath,
      [echoScript],
      { PATH: process.env.PATH, CORE_SECRET: coreSecret, PORT: "0" },
      /echo-plugin listening on (\d+)/,
    );
    children.push(plugin);
    const pluginPort = Number(plugin.match?.[1]);
    await postJson(url, "/admin/plugins/echo", { ...manifest, port: pluginPort }, admin, "PUT");
    await postJson(
      url,
      "/admin/operator/allowlist",
      { caller: "ai-core", target: "echo", operations: ["rag_query"] },
      admin,
      "PUT",
    );

    const nodeProxy = await startChild(
      process.execPath,
      [join(here, "node-proxy.js")],
      { PATH: process.env.PATH, UPSTREAM_PORT: String(pluginPort), PORT: "0" },
      /node-proxy listening on (\d+)/,
    );
    children.push(nodeProxy);
    const nodeProxyPort = Number(nodeProxy.match?.[1]);

    let nginxPort: number | undefined;
    let nginxNote = "";
    try {
      const port = await freePort();
      const nginx = await startChild(
        "sh",
        [nginxScript, String(port), String(pluginPort), join(dir, "nginx")],
        { PATH: `${process.env.PATH}:/usr/sbin:/sbin` },
        undefined,
      );
      children.push(nginx);
      // nginx says nothing when it is up: wait until it answers.
      for (let i = 0; ; i++) {
        const up = await fetch(`http://127.0.0.1:${port}/healthz`).then(
          (r) => r.ok,
          () => false,
        );
        if (up) break;
        if (nginx.child.exitCode !== null || i > 100) {
          throw new Error(`nginx did not come up: ${nginx.output().slice(-500)}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      nginxPort = port;
    } catch (err) {
      nginxNote = `nginx rows skipped: ${(err as Error).message}`;
    }
    const inProcess = async (): Promise<LoadResult[]> => {
      core.child.kill("SIGUSR2");
      for (;;) {
        const line = /\{"inProcess":[^\n]*\}\n/.exec(core.output());
        if (line) return (JSON.parse(line[0]) as { inProcess: LoadResult[] }).inProcess;
        if (core.child.exitCode !== null) throw new Error("the core exited");
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    const corePid = core.child.pid ?? -1;
    const pluginPid = plugin.child.pid ?? -1;
    const nodeProxyPid = nodeProxy.child.pid ?? -1;
    const cpu: CpuSampler = () => {
      const self = process.cpuUsage();
      return {
        client: (self.user + self.system) / 1000,
        core: processCpuMs(corePid),
        plugin: processCpuMs(pluginPid),
        "node proxy": processCpuMs(nodeProxyPid),
        ...(nginxPort === undefined ? {} : { nginx: commandCpuMs("nginx") }),
        ...(pgUrl ? { postgres: commandCpuMs("postgres") } : {}),
      };
    };
    return {
      cpu,
      inProcess,
      coreUrl: url,
      corePort: Number(new URL(url).port),
      aiCoreToken: token.access_token as string,
      coreSecret,
      pluginPort,
      nodeProxyPort,
      nginxPort,
      nginxNote,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

const scenarioNames = {
  direct: "direct to the plugin (HTTP/1.1)",
  nginx: "nginx → plugin (HTTP/1.1)",
  nodeproxy: "bare Node.js proxy → plugin (HTTP/1.1; floor, no checks)",
  rest: "gateway REST → plugin",
  grpc: "gateway gRPC → plugin",
  inprocess: "gateway in process (`core.gateway.call`, no transport)",
} as const;
type Scenario = keyof typeof scenarioNames;

/** BENCH_GATEWAY_ONLY=rest,grpc runs only those scenarios (e.g. to profile the core). */
const only = process.env.BENCH_GATEWAY_ONLY?.split(",");
/** BENCH_GATEWAY_WARMUP_SECONDS: unmeasured load on each path before its first run (default 5). */
const warmUpSeconds = Number(process.env.BENCH_GATEWAY_WARMUP_SECONDS ?? "5");
/** BENCH_GATEWAY_IN_FLIGHT=1 runs only that concurrency (default 1,64). */
const inFlight = (process.env.BENCH_GATEWAY_IN_FLIGHT ?? "1,64").split(",").map(Number);

async function benchGatewayOn(label: string, pgUrl: string | undefined, seconds: number) {
  const s = await setUp(pgUrl, seconds);
  try {
    const results: LoadResult[] = [];
    const byKey = new Map<string, LoadResult>();
    const grpc = grpcCaller(s.coreUrl);
    for (const concurrency of inFlight) {
      const plugin = poster(s.pluginPort, concurrency);
      const gateway = poster(s.corePort, concurrency);
      const nginx = s.nginxPort === undefined ? undefined : poster(s.nginxPort, concurrency);
      const nodeProxy = poster(s.nodeProxyPort, concurrency);
      const pluginAuth = { authorization: `Bearer ${s.coreSecret}` };
      const callerAuth = { authorization: `Bearer ${s.aiCoreToken}` };
      const calls: [Scenario, () => Promise<unknown>][] = [
        ["direct", () => plugin.post("/rag/query", payloadJson, pluginAuth)],
        ...(nginx
          ? [
              ["nginx", () => nginx.post("/rag/query", payloadJson, pluginAuth)] as [
                Scenario,
                () => Promise<unknown>,
              ],
            ]
          : []),
        ["nodeproxy", () => nodeProxy.post("/rag/query", payloadJson, pluginAuth)],
        ["rest", () => gateway.post("/gateway/echo/rag_query", gatewayJson, callerAuth)],
        ["grpc", () => grpc.call(s.aiCoreToken)],
      ];
      if (concurrency === inFlight[0]) {
        checkReply(await plugin.post("/rag/query", payloadJson, pluginAuth), "direct");
        if (nginx) checkReply(await nginx.post("/rag/query", payloadJson, pluginAuth), "nginx");
        checkReply(await nodeProxy.post("/rag/query", payloadJson, pluginAuth), "node proxy");
        checkReply(
          await gateway.post("/gateway/echo/rag_query", gatewayJson, callerAuth),
          "gateway REST",
        );
        await grpc.call(s.aiCoreToken);
      }
      for (const [key, fn] of calls) {
        if (only && !only.includes(key)) continue;
        if (concurrency === inFlight[0]) {
          // Warm every path before its first timed run (at 64 in flight, not measured): the
          // rows then time compiled code, as on a server that has been up a while. The
          // gateway's path is long: a CPU profile (perf) of the core in its first seconds
          // under load showed a quarter of its CPU in V8's optimizing compiler, and under
          // 2% after 20 s; one second of warm-up left most of that in the measured run.
          await runLoad("warm-up", fn, {
            concurrency: 64,
            seconds: warmUpSeconds,
            warmupSeconds: 0,
          });
        }
        const r = await runLoad(scenarioNames[key], fn, { concurrency, seconds, cpu: s.cpu });
        results.push(r);
        byKey.set(`${key}/${concurrency}`, r);
      }
      plugin.close();
      nodeProxy.close();
      gateway.close();
      nginx?.close();
    }
    grpc.close();
    if (!only || only.includes("inprocess")) {
      for (const r of await s.inProcess()) {
        results.push(r);
        byKey.set(`inprocess/${r.concurrency}`, r);
      }
    }
    return [
      `## Operator lane on ${label}: the gateway hop vs direct, nginx and the bare Node.js proxy`,
      "",
      formatResults(results),
      "",
      ...summary(byKey),
      ...(s.nginxNote ? [`- ${s.nginxNote}`] : []),
    ].join("\n");
  } finally {
    await s.stop();
  }
}

function summary(byKey: Map<string, LoadResult>): string[] {
  const lines: string[] = [];
  const get = (k: Scenario, c: number) => byKey.get(`${k}/${c}`);
  const ms = (x: number) => `${x >= 0 ? "+" : ""}${x.toFixed(3)} ms`;
  for (const c of [1, 64]) {
    const direct = get("direct", c);
    if (!direct) continue;
    const nginx = get("nginx", c);
    const added = (r: LoadResult) => [r.p50 - direct.p50, r.p99 - direct.p99] as const;
    const parts: string[] = [];
    for (const k of ["nginx", "nodeproxy", "rest", "grpc", "inprocess"] as const) {
      const r = get(k, c);
      if (!r) continue;
      const [p50, p99] = added(r);
      let text = `${k} adds ${ms(p50)} at p50, ${ms(p99)} at p99, ${((r.rps / direct.rps) * 100).toFixed(0)}% of direct's req/s`;
      if (k !== "nginx" && nginx) {
        const n50 = nginx.p50 - direct.p50;
        text +=
          n50 > 0
            ? `, ${(p50 / n50).toFixed(2)}× nginx's added p50`
            : ", nginx added nothing at p50";
      }
      parts.push(text);
    }
    lines.push(`- ${c} in flight: ${parts.join("; ")}`);
  }
  lines.push(...targets(byKey));
  return lines;
}

/**
 * Issue 17's gateway target against the bare Node.js proxy of the same run: at 64 in flight
 * ≥ 0.5× its req/s and ≤ 2× its CPU per call (the core's against the proxy's), and at 1 in
 * flight ≤ 1.5× the latency it adds at p50.
 */
function targets(byKey: Map<string, LoadResult>): string[] {
  const get = (k: Scenario, c: number) => byKey.get(`${k}/${c}`);
  const proxy64 = get("nodeproxy", 64);
  const proxy1 = get("nodeproxy", 1);
  const direct1 = get("direct", 1);
  const verdict = (ok: boolean) => (ok ? "met" : "not met");
  const lines: string[] = [];
  for (const k of ["rest", "grpc"] as const) {
    const parts: string[] = [];
    const r64 = get(k, 64);
    if (r64 && proxy64) {
      const rps = r64.rps / proxy64.rps;
      parts.push(`${rps.toFixed(2)}× its req/s at 64 in flight (≥ 0.5×: ${verdict(rps >= 0.5)})`);
      const core = r64.cpuUsPerRequest?.core;
      const floor = proxy64.cpuUsPerRequest?.["node proxy"];
      if (core !== undefined && floor !== undefined && floor > 0) {
        const cpu = core / floor;
        parts.push(
          `core CPU ${Math.round(core)} µs/call = ${cpu.toFixed(2)}× the proxy's ${Math.round(floor)} (≤ 2×: ${verdict(cpu <= 2)})`,
        );
      }
    }
    const r1 = get(k, 1);
    if (r1 && proxy1 && direct1) {
      const added = r1.p50 - direct1.p50;
      const floorAdded = proxy1.p50 - direct1.p50;
      const ratio = floorAdded > 0 ? added / floorAdded : Number.POSITIVE_INFINITY;
      parts.push(
        `adds ${added.toFixed(3)} ms at p50 at 1 in flight = ${ratio.toFixed(2)}× the proxy's ${floorAdded.toFixed(3)} ms (≤ 1.5×: ${verdict(ratio <= 1.5)})`,
      );
    }
    if (parts.length > 0) lines.push(`- ${k} vs the bare Node.js proxy: ${parts.join("; ")}`);
  }
  return lines;
}

/**
 * The gateway benchmark on the embedded database, then on PostgreSQL (a schema of its own
 * on BENCH_DATABASE_URL, default the local server) when it answers.
 */
export async function benchGateway(seconds: number): Promise<string> {
  const sections =
    process.env.BENCH_GATEWAY_PGLITE === "0"
      ? []
      : [await benchGatewayOn("embedded PGlite", undefined, seconds)];
  if (process.env.BENCH_GATEWAY_PG === "0") return sections.join("\n\n");
  const url = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
  const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await probe.connect();
  } catch (err) {
    sections.push(`(PostgreSQL at ${url} not reachable, skipped: ${(err as Error).message})`);
    return sections.join("\n\n");
  } finally {
    await probe.end().catch(() => undefined);
  }
  sections.push(await benchGatewayOn("PostgreSQL", url, seconds));
  return sections.join("\n\n");
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const seconds = Number(process.env.BENCH_SECONDS ?? "3");
  console.log(await benchGateway(seconds));
}
