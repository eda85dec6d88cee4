import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import {
  EvaluateBatchRequestSchema,
  EvaluateBatchResponseSchema,
} from "../gen/traitgate/policy/v1/policy_pb.js";
import { loadConfig } from "../src/config.js";
import { createLogger } from "../src/log.js";
import { startCore } from "../src/platform.js";
import { createPolicyDecisions } from "../src/policy/decisions.js";
import type { PolicyActor } from "../src/policy/policy-admin.js";
import type { TraitDefinition } from "../src/policy/registry.js";
import { createPolicyService } from "../src/policy/service.js";
import { principalKey } from "../src/server/context.js";
import { presetResponseOf } from "../src/server/preset-encoding.js";
import { type Database, openDatabase } from "../src/storage/index.js";
import { runLoad } from "./load.js";
import { serviceWorkload, traitgateRequest } from "./policy-workload.js";

/**
 * The Traitgate server of the policy service benchmark, in a process of its own (forked by
 * bench/policy-service.ts, so the load generator does not share its event loop): a real
 * core on loopback with durable audit, on PostgreSQL (`BENCH_DATABASE_URL`, a schema of its
 * own) or, when given "pglite", PGlite in a temporary directory. It registers the workload's
 * traits and activates its policy through the policy area, logs in a user with the role
 * `service`, and tells the parent `{url, token, database}`. On `{inProcess: {seconds,
 * concurrency}}` it measures audited decisions without the transport (the policy area's
 * `decisions.evaluate`, as the service handler calls it); on `{pipeline: {batches}}` the CPU
 * an `EvaluateBatch` costs in JavaScript before transport and database (see pipelineCpu); on
 * "stop" it reports the audit writer's figures and exits.
 *
 * With a third argument "setup" (PostgreSQL only) it sets the schema up as above and closes
 * the core, keeping the schema: it tells the parent `{token, database, schema, secrets}` for
 * `traitgate serve --workers N` processes to serve that schema with the same keys; on "stop"
 * it reports the decision record's size in the schema (no audit writer figures: the workers
 * wrote them) and drops the schema.
 */

const rules = Number(process.argv[2] ?? "200");
const target = process.argv[3] ?? "pglite";
const setupOnly = process.argv[4] === "setup";
const password = "bench-password-long-enough";

async function open(): Promise<{
  db: Database;
  name: string;
  schema?: string;
  cleanup: () => Promise<void>;
}> {
  if (target === "pglite") {
    const dir = mkdtempSync(join(tmpdir(), "traitgate-bench-policy-"));
    const db = await openDatabase({ dataDir: dir, log: createLogger({ level: "silent" }) });
    return { db, name: "PGlite (disk)", cleanup: async () => rmSync(dir, { recursive: true }) };
  }
  const schema = `tg_bench_${randomBytes(6).toString("hex")}`;
  const db = await openDatabase({
    connection: target,
    schema,
    poolSize: 10,
    acquireTimeoutMs: 3_000,
    log: createLogger({ level: "silent" }),
  });
  return {
    db,
    name: "PostgreSQL",
    schema,
    cleanup: () => db.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`),
  };
}

if (setupOnly && target === "pglite") throw new Error("setup: PostgreSQL only");
const { db, name, schema, cleanup } = await open();
const env = {
  JWT_SECRET: randomBytes(32).toString("base64url"),
  DATA_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
  PORT: "0",
  HOST: "127.0.0.1",
  LOG_LEVEL: "warn",
};
const { config } = loadConfig(env);
const log = createLogger({ level: "warn" });
const core = await startCore({ config, log, db, env });

const { workload } = serviceWorkload(rules);
const actor: PolicyActor = {
  kind: "user",
  userId: "bench",
  username: "bench",
  apiKeyId: undefined,
};
const meta = { requestId: undefined };
// Junior roles first: a trait's implications must be registered before it.
const definitions = [...workload.definitions].reverse() as TraitDefinition[];
for (const def of definitions) await core.policy.admin.putTrait(actor, meta, def);
await core.policy.admin.putPolicy(actor, meta, {
  document: workload.doc,
  description: "benchmark workload",
  activate: true,
});

await core.identity.createUser({
  username: "bench-service",
  email: "bench-service@example.test",
  password,
  roles: ["service"],
});
const res = await fetch(`${core.server.url}/auth/login`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ username: "bench-service", password }),
});
const { token } = (await res.json()) as { token: string };
if (setupOnly) {
  await core.close();
  const secrets = { JWT_SECRET: env.JWT_SECRET, DATA_ENCRYPTION_KEY: env.DATA_ENCRYPTION_KEY };
  process.send?.({ token, database: name, schema, secrets });
} else {
  process.send?.({
    url: core.server.url,
    token,
    database: name,
    schema,
    version: core.policy.current().version,
  });
}

const requests = workload.requests.map((_, i) => traitgateRequest(workload, i));
const caller = { kind: "service" as const, userId: "bench", roles: [] };

// The parent gone (it failed or was killed) or the run interrupted (Ctrl-C reaches the whole
// process group, SIGINT): the schema is dropped all the same.
let stopping = false;
const abandon = async () => {
  if (stopping) return;
  stopping = true;
  if (!setupOnly) await core.close().catch(() => {});
  await cleanup().catch(() => {});
  await db.close().catch(() => {});
  process.exit(1);
};
process.on("disconnect", abandon);
process.on("SIGINT", abandon);
process.on("SIGTERM", abandon);

/**
 * CPU µs per `EvaluateBatch` of `groups` (encoded requests) through the service handler:
 * protobuf decode, the decisions with their compact audit records built (handed to a writer
 * that keeps nothing: no database), the answer's protobuf encoding (as the gRPC path writes
 * it). No HTTP/2, interceptors
 * or validation. Rounds of `batches`, after one untimed round; the minimum and median.
 */
async function pipelineCpu(
  groups: Uint8Array[],
  batches: number,
  rounds = 8,
): Promise<{ min: number; median: number }> {
  const decisions = createPolicyDecisions({
    live: core.policy.live,
    audit: { write: async () => ({ id: "", seq: "0", hash: "" }) },
  });
  const service = createPolicyService({ decisions, admin: core.policy.admin });
  const values = createContextValues();
  values.set(principalKey, {
    kind: "service",
    userId: "bench",
    username: "bench",
    roles: ["service"],
    sessionId: "",
  });
  // The handler reads the principal, request id and origin from the context's values only.
  const context = { values } as unknown as Parameters<typeof service.evaluateBatch>[1];
  const round = async () => {
    const before = process.cpuUsage();
    for (let i = 0; i < batches; i++) {
      const req = fromBinary(EvaluateBatchRequestSchema, groups[i % groups.length]!);
      const res = await service.evaluateBatch(req, context);
      // As the gRPC path sends it: the handler's preset binary, else protobuf-es.
      const message = create(EvaluateBatchResponseSchema, res);
      presetResponseOf(message)?.binary?.() ?? toBinary(EvaluateBatchResponseSchema, message);
    }
    const used = process.cpuUsage(before);
    return (used.user + used.system) / batches;
  };
  await round();
  const all: number[] = [];
  for (let r = 0; r < rounds; r++) all.push(await round());
  all.sort((a, b) => a - b);
  return { min: all[0]!, median: all[Math.floor(rounds / 2)]! };
}

process.on("message", async (message) => {
  const pipeline = (message as { pipeline?: { batches: number; groups: number[][] } }).pipeline;
  if (pipeline !== undefined) {
    const groups = pipeline.groups.map((group) =>
      toBinary(
        EvaluateBatchRequestSchema,
        create(EvaluateBatchRequestSchema, {
          requests: group.map((i) => {
            const r = requests[i]!;
            return { traits: [...r.traits], context: r.context };
          }),
        }),
      ),
    );
    process.send?.({ pipeline: await pipelineCpu(groups, pipeline.batches) });
    return;
  }
  const measure = (message as { inProcess?: { seconds: number; concurrency: number } }).inProcess;
  if (measure !== undefined) {
    let n = 0;
    const result = await runLoad(
      "decisions.evaluate (in process, audited)",
      () => core.policy.decisions.evaluate(caller, undefined, requests[n++ % requests.length]!),
      { ...measure, warmupSeconds: Math.min(1, measure.seconds / 3) },
    );
    process.send?.({ result });
    return;
  }
  if (message !== "stop") return;
  stopping = true;
  const stats = setupOnly ? undefined : core.audit.stats();
  // The decision record's stored size (issue 17): each decision event's row ÷ the decisions
  // it holds, and the values those rows name (written once each). Apart: the rows of calls
  // (a request id, the client's address, a user's id) and those of the in-process rows
  // (`decisions.evaluate` without a request: smaller, they would pull the average down).
  const { rows: sizes } = await db.query<{
    action: string;
    called: boolean;
    events: string;
    bytes: number;
  }>(
    `SELECT action, request_id IS NOT NULL AS called, count(*)::text AS events,
       avg(pg_column_size(e.*)::float8 /
           CASE WHEN action = 'policy_decision_batch' THEN (details->>'count')::int ELSE 1 END
       ) AS bytes
     FROM audit_events e WHERE action IN ('policy_decision', 'policy_decision_batch')
     GROUP BY action, called`,
  );
  const { rows: values } = await db.query<{ values: string; bytes: string }>(
    `SELECT count(*)::text AS values, coalesce(sum(pg_column_size(v.*)), 0)::text AS bytes
     FROM audit_values v`,
  );
  const record = {
    sizes: sizes.map((r) => ({
      action: r.action,
      called: r.called,
      events: Number(r.events),
      bytes: r.bytes,
    })),
    values: Number(values[0]?.values ?? 0),
    valueBytes: Number(values[0]?.bytes ?? 0),
  };
  if (!setupOnly) await core.close();
  await cleanup().catch(() => {});
  await db.close();
  process.send?.({ stats, record }, () => process.exit(0));
});
