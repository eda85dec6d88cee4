import { type ChildProcess, fork } from "node:child_process";
import { pathToFileURL } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pg from "pg";
import {
  EvaluateBatchResponseSchema,
  EvaluateResponseSchema,
  PolicyService,
} from "../gen/traitgate/policy/v1/policy_pb.js";
import type { AuditWriterStats } from "../src/audit/index.js";
import { grpcFrame, type RawGrpcClient, rawGrpcClient } from "./grpc-client.js";
import { onInterrupt } from "./interrupt.js";
import {
  type CpuSampler,
  commandCpuMs,
  type LoadResult,
  processCpuMs,
  processTreeCpuMs,
  runLoad,
} from "./load.js";
import { type CerbosPeer, loadPeers } from "./peers.js";
import {
  batchSize,
  type EvaluateRequestShape,
  requestMessages,
  serviceBatches,
  serviceRequests,
} from "./policy-frames.js";
import {
  cpuByProcess,
  schemaConnection,
  spreadConnections,
  startWorkers,
} from "./policy-workers.js";
import { oracleAnswer, oracleAnswers, serviceWorkload, type Workload } from "./policy-workload.js";

/**
 * The policy *service* against the Cerbos PDP, both over gRPC on loopback, on the issue's
 * workload (200 rules, 50 roles in a hierarchy): Traitgate's `Evaluate` (every decision
 * committed to the audit log before the answer) at 1 and 64 calls in flight, and
 * `EvaluateBatch` in batches of 50 (one audit event per batch holding its 50 decisions);
 * Cerbos's CheckResources with one resource (unary) and with 50 resources of one principal
 * (batch). Each server runs in its own process; the load generator is this process.
 * Both are checked against the reference evaluator before they are timed.
 *
 * Two clients each: the gRPC libraries (connect-node for Traitgate, `@cerbos/grpc` for
 * Cerbos, as the issue names), and one minimal client for both (bench/grpc-client.ts:
 * requests encoded before the run, answers decoded and checked), which leaves more of the
 * shared 2-core machine to the servers, so that those rows compare the servers.
 *
 * The Node.js floor (bench/policy-floor.ts) over the minimal client: a `node:http2` server
 * answering the same calls by their bytes, then the same with a durable row per call (group
 * commit to PostgreSQL): what Node's HTTP/2 and a commit before each answer cost without
 * Traitgate's work (`BENCH_POLICY_FLOOR=0` leaves it out).
 *
 * Then Traitgate as it runs on a machine of several cores, `traitgate serve --workers 2`
 * (bench/policy-workers.ts) on the same PostgreSQL in a schema of its own, set up by
 * bench/policy-server.ts; node:cluster hands out connections, not calls, so the minimal client
 * spreads its calls over several connections (`BENCH_CONNECTIONS`, default 4), and Cerbos is
 * driven over as many in rows of their own (beside its single-connection rows).
 */

const rules = 200;
const defaultUrl = "postgres://postgres@127.0.0.1:5432/test";
const workers = 2;
const connections = Number(process.env.BENCH_CONNECTIONS ?? "4");

interface Started {
  child: ChildProcess;
  url: string;
  token: string;
  database: string;
  /** On PostgreSQL: the schema it made. */
  schema?: string;
}

/** bench/policy-server.ts set up a schema for `serve --workers` and closed its core. */
interface SetUp {
  child: ChildProcess;
  token: string;
  database: string;
  schema: string;
  secrets: Record<string, string>;
}

/** Forks bench/policy-server.ts (or `script`); resolves with its first message. */
async function forkServer<T>(
  args: string[],
  execArgv: string[] = [],
  script = new URL("./policy-server.js", import.meta.url),
): Promise<T & { child: ChildProcess }> {
  const child = fork(script, [String(rules), ...args], {
    stdio: ["ignore", "ignore", "inherit", "ipc"],
    execArgv,
  });
  const ready = await new Promise<T>((resolve, reject) => {
    child.once("message", (m) => resolve(m as T));
    child.once("exit", (code) =>
      reject(new Error(`${script.pathname.split("/").pop()} exited with ${code}`)),
    );
  });
  return { child, ...ready };
}

function startTraitgate(database: string): Promise<Started> {
  // BENCH_PROFILE_DIR: write the server's CPU profile there (node --cpu-prof).
  const profile = process.env.BENCH_PROFILE_DIR;
  return forkServer<Omit<Started, "child">>(
    [database],
    profile ? ["--cpu-prof", `--cpu-prof-dir=${profile}`] : [],
  );
}

/** The decision record's stored size, as bench/policy-server.ts measures it at stop. */
interface RecordSize {
  /** By action, and whether the events came from calls (a request id) or the in-process rows. */
  sizes: { action: string; called: boolean; events: number; bytes: number }[];
  values: number;
  valueBytes: number;
}

/**
 * "stop" to bench/policy-server.ts: its figures (no audit writer's for a set-up), then its
 * exit. It drops its schema; if it had died before, the schema is dropped here.
 */
async function stopTraitgate(
  s: { child: ChildProcess; schema?: string },
  url: string,
): Promise<{ stats?: AuditWriterStats; record: RecordSize } | undefined> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) {
    if (s.schema !== undefined) await dropSchema(url, s.schema).catch(() => {});
    return undefined;
  }
  const stats = new Promise<{ stats?: AuditWriterStats; record: RecordSize } | undefined>(
    (resolve) => {
      s.child.once("message", (m) =>
        resolve(m as { stats?: AuditWriterStats; record: RecordSize }),
      );
      s.child.once("exit", () => resolve(undefined));
    },
  );
  s.child.send("stop");
  const result = await stats;
  await new Promise((r) => setTimeout(r, 200));
  if (s.child.exitCode === null) s.child.kill();
  if (result === undefined && s.schema !== undefined) {
    await dropSchema(url, s.schema).catch(() => {});
  }
  return result;
}

const floorEngine = {
  bare: "Node.js floor (node:http2, answers looked up by the request's bytes)",
  durable: "Node.js floor + a durable row per call (group commit to PostgreSQL)",
} as const;

/** What bench/policy-floor.ts tells at stop (durable: its rows and commits). */
interface FloorReport {
  unaryRows?: number;
  unaryBytes?: number;
  batchRows?: number;
  batchBytes?: number;
  transactions?: number;
  largestGroup?: number;
  failed?: number;
}

/**
 * "stop" to bench/policy-floor.ts: its report, then its exit (killed after 5 s). It drops its
 * schema; the drop is repeated here (IF EXISTS) in case it could not.
 */
async function stopFloor(
  floor: { child: ChildProcess; schema?: string },
  url: string,
): Promise<FloorReport | undefined> {
  const { child, schema } = floor;
  let report: FloorReport | undefined;
  if (child.exitCode === null && child.signalCode === null) {
    let timer: NodeJS.Timeout | undefined;
    const exited = new Promise<void>((resolve) => {
      child.once("message", (m) => {
        report = m as FloorReport;
      });
      child.once("exit", () => resolve());
      timer = setTimeout(resolve, 5_000);
    });
    child.send("stop");
    await exited;
    clearTimeout(timer);
    if (child.exitCode === null) child.kill();
  }
  if (schema !== undefined) await dropSchema(url, schema).catch(() => {});
  return report;
}

async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** The first 10 batches, answered as the reference evaluator does, or an error. */
async function checkBatches(
  groups: number[][],
  w: Workload,
  decide: (group: number[]) => Promise<boolean[]>,
  name: string,
): Promise<void> {
  for (const group of groups.slice(0, 10)) {
    const got = await decide(group);
    group.forEach((i, k) => {
      if (got[k] !== oracleAnswer(w, i)) throw new Error(`${name} batch differs on request ${i}`);
    });
  }
}

interface Scenario {
  engine: string;
  /** "library", "minimal" (bench/grpc-client.ts) or "" (in process). */
  client: string;
  kind: "unary" | "batch" | "in-process";
  result: LoadResult;
}

/** The note on the decision record's stored size (issue 17 targets), from policy-server's query. */
function recordNote({ sizes, values, valueBytes }: RecordSize, of: string): string {
  const decisions = sizes.reduce(
    (n, r) => n + r.events * (r.action === "policy_decision_batch" ? batchSize : 1),
    0,
  );
  // The target is judged on the calls' rows; the in-process rows (no request id, origin or
  // user's id) are smaller and told apart.
  const size = (action: string, target: number) => {
    const r = sizes.find((x) => x.action === action && x.called);
    const local = sizes.find((x) => x.action === action && !x.called);
    const inProcess =
      local === undefined
        ? ""
        : `; ${Math.round(local.bytes)} bytes over the ${local.events.toLocaleString("en-US")} in-process events`;
    return r === undefined
      ? `none from calls${inProcess}`
      : `${Math.round(r.bytes)} bytes per decision over ${r.events.toLocaleString("en-US")} events of calls (target ≤ ${target}: ${r.bytes <= target ? "met" : "NOT met"})${inProcess}`;
  };
  return `- decision record of ${of} (pg_column_size of each decision event's row ÷ its decisions): unary ${size("policy_decision", 512)}; in batches ${size("policy_decision_batch", 128)}; the ${values.toLocaleString("en-US")} values they name (audit_values, written once each) ${valueBytes.toLocaleString("en-US")} bytes in all, ${decisions > 0 ? Math.round(valueBytes / decisions) : 0} bytes per decision of the run`;
}

/** A command's log lines, counted by message: `2 × "…"`. */
function loggedMessages(output: string): string {
  const counts = new Map<string, number>();
  for (const line of output.split("\n")) {
    if (line.trim() === "") continue;
    let msg = line;
    try {
      msg = String((JSON.parse(line) as { msg?: unknown }).msg ?? line);
    } catch {
      // Not a log line: counted as it is.
    }
    msg = msg.length > 100 ? `${msg.slice(0, 100)}…` : msg;
    counts.set(msg, (counts.get(msg) ?? 0) + 1);
  }
  return [...counts].map(([msg, n]) => `${n} × "${msg}"`).join("; ");
}

/** Evaluate and EvaluateBatch over the minimal client, every request encoded once. */
function minimalCalls(requests: readonly EvaluateRequestShape[], groups: number[][]) {
  const messages = requestMessages(requests, groups);
  const unaryFrames = messages.unary.map(grpcFrame);
  const batchFrames = messages.batch.map(grpcFrame);
  const evaluatePath = "/traitgate.policy.v1.PolicyService/Evaluate";
  const batchPath = "/traitgate.policy.v1.PolicyService/EvaluateBatch";
  return (raw: RawGrpcClient, headers: Record<string, string>) => ({
    unary: async (i: number) =>
      fromBinary(EvaluateResponseSchema, await raw.call(evaluatePath, unaryFrames[i]!, headers))
        .decision === "allow",
    batch: async (b: number) =>
      fromBinary(
        EvaluateBatchResponseSchema,
        await raw.call(batchPath, batchFrames[b]!, headers),
      ).decisions.map((d) => d.decision === "allow"),
  });
}

export async function benchPolicyService(seconds: number): Promise<string> {
  const { workload: w, dropped } = serviceWorkload(rules);
  const checked = 1_000;
  const oracle = oracleAnswers(w, checked);
  const groups = serviceBatches(w);
  const notes: string[] = [
    `- workload: ${w.doc.rules.length} rules (${dropped} of ${rules} left out: activation refuses rules the analysis proves dead; no decision changes), ${w.requests.length} requests, batches of ${batchSize} requests of one user (${groups.length} batches)`,
  ];
  const scenarios: Scenario[] = [];
  // CPU per call of each party (load generator, the server under test, PostgreSQL) over the
  // measured window: what a call costs whatever the shared machine does to latency.
  let serverCpu = () => Number.NaN;
  const cpu: CpuSampler = () => {
    const self = process.cpuUsage();
    return {
      client: (self.user + self.system) / 1000,
      server: serverCpu(),
      postgres: commandCpuMs("postgres"),
    };
  };
  const load = (name: string, fn: () => Promise<unknown>, concurrency: number) =>
    runLoad(name, fn, { concurrency, seconds, warmupSeconds: Math.min(1, seconds / 3), cpu });
  const requests = serviceRequests(w);
  const minimal = minimalCalls(requests, groups);

  /** The minimal client's calls checked against the reference evaluator, then timed. */
  async function runMinimal(
    calls: { unary: (i: number) => Promise<boolean>; batch: (b: number) => Promise<boolean[]> },
    engine: string,
    client: string,
    names: readonly [string, string] = ["Evaluate", "EvaluateBatch"],
  ): Promise<void> {
    for (let i = 0; i < checked; i++) {
      if ((await calls.unary(i)) !== oracle[i]) {
        throw new Error(`${engine} (${client} client) differs on request ${i}`);
      }
    }
    await checkBatches(
      groups,
      w,
      (group) => calls.batch(groups.indexOf(group)),
      `${engine} (${client} client)`,
    );
    let rn = 0;
    let rg = 0;
    for (const c of [1, 64]) {
      scenarios.push({
        engine,
        client,
        kind: "unary",
        result: await load(names[0], () => calls.unary(rn++ % requests.length), c),
      });
    }
    for (const c of [1, 8]) {
      scenarios.push({
        engine,
        client,
        kind: "batch",
        result: await load(names[1], () => calls.batch(rg++ % groups.length), c),
      });
    }
  }

  // Traitgate, one process.
  let database = process.env.BENCH_DATABASE_URL?.trim() || defaultUrl;
  let server: Started;
  try {
    server = await startTraitgate(database);
  } catch {
    notes.push("- PostgreSQL unreachable: Traitgate ran on PGlite in a temporary directory");
    database = "pglite";
    server = await startTraitgate(database);
  }
  const postgresUrl = database;
  let stopped: Awaited<ReturnType<typeof stopTraitgate>>;
  try {
    const pid = server.child.pid ?? -1;
    serverCpu = () => processCpuMs(pid);
    await runSingleProcess(server);
  } catch (err) {
    const { exitCode, signalCode } = server.child;
    if (exitCode === null && signalCode === null) throw err;
    throw new Error(
      `${(err as Error).message}; the policy server had exited (${exitCode ?? signalCode})`,
      {
        cause: err,
      },
    );
  } finally {
    stopped = await stopTraitgate(server, database);
  }
  const stats = stopped?.stats;
  notes.push(
    `- Traitgate on ${server.database}, durable audit: ${stats?.events ?? "?"} audit events in ${stats?.transactions ?? "?"} transactions (largest group ${stats?.largestBatch ?? "?"}), ${stats?.failedTransactions ?? "?"} failed`,
  );
  if (stopped !== undefined) notes.push(recordNote(stopped.record, "the one-process server"));

  async function runSingleProcess(server: Started): Promise<void> {
    const client = createClient(PolicyService, createGrpcTransport({ baseUrl: server.url }));
    const headers = { authorization: `Bearer ${server.token}` };
    for (let i = 0; i < checked; i++) {
      const got = await client.evaluate(requests[i]!, { headers });
      if ((got.decision === "allow") !== oracle[i]) {
        throw new Error(`traitgate service differs from the reference on request ${i}`);
      }
    }
    await checkBatches(
      groups,
      w,
      async (group) => {
        const out = await client.evaluateBatch(
          { requests: group.map((i) => requests[i]!) },
          { headers },
        );
        return out.decisions.map((d) => d.decision === "allow");
      },
      "traitgate service",
    );
    let n = 0;
    const unary = () => client.evaluate(requests[n++ % requests.length]!, { headers });
    let g = 0;
    const batch = () =>
      client.evaluateBatch(
        { requests: groups[g++ % groups.length]!.map((i) => requests[i]!) },
        { headers },
      );
    for (const c of [1, 64]) {
      scenarios.push({
        engine: "traitgate",
        client: "library",
        kind: "unary",
        result: await load("Evaluate", unary, c),
      });
    }
    for (const c of [1, 8]) {
      scenarios.push({
        engine: "traitgate",
        client: "library",
        kind: "batch",
        result: await load("EvaluateBatch", batch, c),
      });
    }
    // The same calls over the minimal client, encoded beforehand.
    const raw = rawGrpcClient(server.url);
    try {
      await runMinimal(minimal(raw, headers), "traitgate", "minimal");
    } finally {
      raw.close();
    }
    // The same audited decisions without the transport, in the server process.
    for (const c of [1, 64]) {
      const result = await new Promise<LoadResult>((resolve) => {
        server.child.once("message", (m) => resolve((m as { result: LoadResult }).result));
        server.child.send({ inProcess: { seconds, concurrency: c } });
      });
      scenarios.push({ engine: "traitgate", client: "", kind: "in-process", result });
    }
    // What an EvaluateBatch costs in JavaScript before transport and database.
    const pipeline = await new Promise<{ min: number; median: number }>((resolve) => {
      server.child.once("message", (m) =>
        resolve((m as { pipeline: { min: number; median: number } }).pipeline),
      );
      server.child.send({ pipeline: { batches: 3_000, groups } });
    });
    notes.push(
      `- EvaluateBatch in the server's process without transport or database (protobuf decode, the service handler, 50 decisions with their audit records built, the answer encoded; 8 rounds of 3,000 batches): ${Math.round(pipeline.min)} µs CPU per batch at the least, ${Math.round(pipeline.median)} µs median`,
    );
  }

  // The Node.js floor (bench/policy-floor.ts): bare, then with a durable row per call.
  const floors = process.env.BENCH_POLICY_FLOOR === "0" ? [] : (["bare", "durable"] as const);
  for (const mode of floors) {
    if (mode === "durable" && postgresUrl === "pglite") {
      notes.push(`- ${floorEngine[mode]} not run: it needs PostgreSQL`);
      continue;
    }
    // A reference: its failure is a note, not the end of the benchmark.
    try {
      const floor = await forkServer<{ url: string; schema?: string }>(
        [mode, postgresUrl],
        [],
        new URL("./policy-floor.js", import.meta.url),
      );
      let report: FloorReport | undefined;
      try {
        serverCpu = () => processCpuMs(floor.child.pid ?? -1);
        const raw = rawGrpcClient(floor.url);
        try {
          await runMinimal(minimal(raw, {}), floorEngine[mode], "minimal");
        } finally {
          raw.close();
        }
      } finally {
        report = await stopFloor(floor, postgresUrl);
      }
      if (mode === "durable" && report?.transactions !== undefined) {
        const kind = (n = 0, bytes = 0) =>
          `${n.toLocaleString("en-US")} rows of ${Math.round(bytes)} bytes`;
        notes.push(
          `- ${floorEngine[mode]}: ${kind(report.unaryRows, report.unaryBytes)} (unary) and ${kind(report.batchRows, report.batchBytes)} (batches) on average (pg_column_size), in ${report.transactions.toLocaleString("en-US")} transactions (largest group ${report.largestGroup}), ${report.failed ?? 0} failed`,
        );
      }
    } catch (err) {
      notes.push(`- ${floorEngine[mode]} not run: ${(err as Error).message}`);
    }
  }

  // Traitgate as `serve --workers 2` on the same PostgreSQL, in a schema of its own.
  const workersEngine = `traitgate --workers ${workers}`;
  if (postgresUrl === "pglite") notes.push(`- ${workersEngine} not run: it needs PostgreSQL`);
  else {
    const setUp = await forkServer<Omit<SetUp, "child">>([postgresUrl, "setup"]);
    let record: RecordSize | undefined;
    try {
      await runWorkers(setUp);
    } finally {
      // The schema's decision record, then the schema dropped.
      record = (await stopTraitgate(setUp, postgresUrl))?.record;
    }
    if (record !== undefined) notes.push(recordNote(record, `${workersEngine}`));
  }

  async function runWorkers(setUp: SetUp): Promise<void> {
    const started = await startWorkers({
      workers,
      connection: schemaConnection(postgresUrl, setUp.schema),
      secrets: setUp.secrets,
    });
    const headers = { authorization: `Bearer ${setUp.token}` };
    let raw = rawGrpcClient(started.url, { connections });
    try {
      // Each connection is opened by a call on it; until every worker holds its share.
      const spread = await spreadConnections(
        started,
        workers,
        async () => {
          raw = rawGrpcClient(started.url, { connections });
          const check = minimal(raw, headers);
          for (let k = 0; k < connections; k++) await check.unary(k);
          return raw.localPorts();
        },
        () => raw.close(),
      );
      // Fresh processes, warmed up untimed as the one-process server was by its library rows.
      const warm = minimal(raw, headers);
      let k = 0;
      const untimed = { seconds: 2 * seconds, warmupSeconds: 0 };
      await runLoad("warm-up", () => warm.unary(k++ % requests.length), {
        ...untimed,
        concurrency: 64,
      });
      await runLoad("warm-up", () => warm.batch(k++ % groups.length), {
        ...untimed,
        concurrency: 8,
      });
      const pids = started.workerPids();
      serverCpu = () => processTreeCpuMs(started.pid);
      const before = cpuByProcess(pids);
      await runMinimal(minimal(raw, headers), workersEngine, `minimal, ${connections} connections`);
      const after = cpuByProcess(pids);
      // A worker that died and was started again during the rows would be missing from their
      // CPU time (and its calls would have failed over): the rows do not stand then.
      if (
        started.output().includes("worker died") ||
        [...started.workerPids()].sort().join() !== [...pids].sort().join()
      ) {
        throw new Error("a worker died during the timed rows");
      }
      const split = pids.map(
        (p) => `${(((after.get(p) ?? 0) - (before.get(p) ?? 0)) / 1000).toFixed(1)} s`,
      );
      notes.push(
        `- ${workersEngine}: \`traitgate serve --workers ${workers}\` (dist/src/cli.js, LOG_LEVEL=warn) on ${setUp.database} in a schema of its own, set up by the one-process core (traits, policy, user, token) before the workers started; durable audit; warmed up untimed (Evaluate at 64 and EvaluateBatch at 8 in flight, ${2 * seconds} s each), then checked against the reference; server CPU is the primary's and its workers'; ${connections} connections held by the workers ${[...spread.values()].join(" + ")}; CPU of each worker over its rows ${split.join(" + ")}`,
      );
      const logged = loggedMessages(started.output());
      if (logged !== "") notes.push(`- ${workersEngine} logged (warn and above): ${logged}`);
    } catch (err) {
      // What the workers logged tells why (a worker that died, the database).
      throw new Error(
        `${workersEngine}: ${(err as Error).message}; it logged: ${started.output().slice(-3000)}`,
        { cause: err },
      );
    } finally {
      raw.close();
      await started.stop();
    }
  }

  // Cerbos: with its decision log (the peer Traitgate is compared with), then without.
  const peers = await loadPeers();
  if ("missing" in peers) notes.push(`- Cerbos not run: ${peers.missing}`);
  else {
    for (const audit of [true, false]) {
      let cerbos: CerbosPeer | undefined;
      try {
        cerbos = await peers.startCerbos(w, { audit });
      } catch (err) {
        notes.push(`- Cerbos not run: ${(err as Error).message}`);
        continue;
      }
      // Spawned by the peer, not by bench/children.ts: stopped here if the run is interrupted.
      const peer = cerbos;
      const forget = onInterrupt(() => peer.close());
      try {
        await runCerbos(cerbos, audit);
      } finally {
        forget();
        await cerbos.close();
      }
    }
  }

  async function runCerbos(peer: CerbosPeer, audit: boolean): Promise<void> {
    serverCpu = () => processCpuMs(peer.pid);
    const engine = `cerbos ${peer.version}${audit ? ", decision log" : ", no audit"}`;
    let m = 0;
    let h = 0;
    if (audit) {
      for (let i = 0; i < checked; i++) {
        if ((await peer.unary(i)) !== oracle[i]) {
          throw new Error(`cerbos differs from the reference on request ${i}`);
        }
      }
      await checkBatches(groups, w, (group) => peer.batch(group), "cerbos");
      for (const c of [1, 64]) {
        scenarios.push({
          engine,
          client: "library",
          kind: "unary",
          result: await load(
            "CheckResources (1 resource)",
            () => peer.unary(m++ % w.requests.length),
            c,
          ),
        });
      }
      for (const c of [1, 8]) {
        scenarios.push({
          engine,
          client: "library",
          kind: "batch",
          result: await load(
            "CheckResources (50 resources)",
            () => peer.batch(groups[h++ % groups.length]!),
            c,
          ),
        });
      }
    }
    peer.prepareBatches(groups);
    const calls = {
      unary: (i: number) => peer.rawUnary(i),
      batch: (b: number) => peer.rawBatch(b),
    };
    const names = ["CheckResources (1 resource)", "CheckResources (50 resources)"] as const;
    await runMinimal(calls, engine, "minimal", names);
    if (connections > 1) {
      peer.rawConnections(connections);
      await runMinimal(calls, engine, `minimal, ${connections} connections`, names);
    }
    notes.push(
      audit
        ? `- Cerbos ${peer.version} PDP on loopback with its decision log (audit enabled, access and decision logs, \`local\` backend: its durable one), telemetry off, principals carrying every role they reach; the ÷ Cerbos column compares every other row with these rows (same client, same connections)`
        : `- Cerbos ${peer.version} with its audit off: reference rows, minimal client only`,
    );
  }

  const decisionsPerCall = (s: Scenario) => (s.kind === "batch" ? batchSize : 1);
  const find = (engine: string, client: string, kind: string, c: number, variant = "") =>
    scenarios.find(
      (s) =>
        s.engine.startsWith(engine) &&
        s.engine.includes(variant) &&
        s.client === client &&
        s.kind === kind &&
        s.result.concurrency === c,
    );
  const rows = scenarios.map((s) => {
    const r = s.result;
    const peer = s.engine.startsWith("cerbos")
      ? undefined
      : find("cerbos", s.client, s.kind, r.concurrency, "decision log");
    const ratio = peer ? `${(r.rps / peer.result.rps).toFixed(2)}×` : "";
    const cpuOf = (party: string) => {
      const us = r.cpuUsPerRequest?.[party];
      return us === undefined ? "" : String(Math.round(us));
    };
    return `| ${s.engine} | ${s.client} | ${r.name} | ${r.concurrency} | ${Math.round(r.rps).toLocaleString("en-US")} | ${Math.round(r.rps * decisionsPerCall(s)).toLocaleString("en-US")} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.errors} | ${ratio} | ${cpuOf("client")} | ${cpuOf("server")} | ${cpuOf("postgres")} |`;
  });
  return [
    "## Policy service over gRPC: Traitgate (durable audit) vs the Cerbos PDP (decision log on)",
    "",
    "| engine | client | call | in flight | calls/s | decisions/s | p50 ms | p99 ms | errors | ÷ Cerbos (decision log) | client CPU µs/call | server CPU µs/call | postgres CPU µs/call |",
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows,
    "",
    ...targetNotes(find),
    ...notes,
    "- CPU µs/call: CPU time of the load generator (this process), the server under test (Traitgate's process, the `--workers` primary and its workers together, the Node.js floor's process, or the Cerbos PDP) and every PostgreSQL process, over the measured window, per call (from /proc, 10 ms ticks; none for the in-process rows)",
    `- every server (the floors too) answered the first ${checked} requests (unary) and 10 batches (500 requests) as the reference evaluator did before they were timed`,
  ].join("\n");
}

type FindScenario = (
  engine: string,
  client: string,
  kind: string,
  c: number,
  variant?: string,
) => Scenario | undefined;

/**
 * Issue 17's targets against Cerbos with its decision log, over the minimal client (one
 * process; `--workers` beside it), and Traitgate against the durable Node.js floor.
 */
function targetNotes(find: FindScenario): string[] {
  const out: string[] = [];
  const x = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  const met = (ok: boolean) => (ok ? "met" : "NOT met");
  for (const [engine, client, label] of [
    ["traitgate", "minimal", "Traitgate, one process"],
    ["traitgate --workers", `minimal, ${connections} connections`, "Traitgate `--workers`"],
  ] as const) {
    const pair = (kind: string, c: number) => {
      const own = find(engine, client, kind, c);
      const peer = find("cerbos", client, kind, c, "decision log");
      return own && peer ? { own: own.result, peer: peer.result } : undefined;
    };
    const u64 = pair("unary", 64);
    const u1 = pair("unary", 1);
    const b8 = pair("batch", 8);
    const parts: string[] = [];
    if (u64) {
      parts.push(
        `Evaluate at 64 in flight ${x(u64.own.rps, u64.peer.rps)} Cerbos's calls/s (≥ 1.0×: ${met(u64.own.rps >= u64.peer.rps)}), p99 ${u64.own.p99.toFixed(2)} ms against ${u64.peer.p99.toFixed(2)} (no worse: ${met(u64.own.p99 <= u64.peer.p99)})`,
      );
    }
    if (u1) {
      parts.push(
        `at 1 in flight p50 ${x(u1.own.p50, u1.peer.p50)} Cerbos's (≤ 2×: ${met(u1.own.p50 <= 2 * u1.peer.p50)})`,
      );
    }
    if (b8) {
      parts.push(
        `EvaluateBatch at 8 in flight ${x(b8.own.rps, b8.peer.rps)} Cerbos's decisions/s (≥ 2.0×: ${met(b8.own.rps >= 2 * b8.peer.rps)})`,
      );
    }
    if (parts.length > 0) out.push(`- targets, ${label}: ${parts.join("; ")}`);
  }
  const floor = (kind: string, c: number) => find(floorEngine.durable, "minimal", kind, c);
  const parts: string[] = [];
  for (const [kind, c, call] of [
    ["unary", 64, "Evaluate at 64"],
    ["unary", 1, "Evaluate at 1"],
    ["batch", 8, "EvaluateBatch at 8"],
  ] as const) {
    const own = find("traitgate", "minimal", kind, c);
    const base = floor(kind, c);
    if (!own || !base) continue;
    const cpu = (s: Scenario) => {
      const us = s.result.cpuUsPerRequest?.server;
      return us === undefined ? "?" : String(Math.round(us));
    };
    parts.push(
      `${call} in flight ${x(own.result.rps, base.result.rps)} its calls/s, p50 ${x(own.result.p50, base.result.p50)}, server CPU ${cpu(own)} against ${cpu(base)} µs per call`,
    );
  }
  if (parts.length > 0) {
    out.push(`- Traitgate (one process) against the durable Node.js floor: ${parts.join("; ")}`);
  }
  return out;
}

// `node dist/bench/policy-service.js`: this benchmark alone (BENCH_SECONDS, default 3).
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(await benchPolicyService(Number(process.env.BENCH_SECONDS ?? "3")));
}
