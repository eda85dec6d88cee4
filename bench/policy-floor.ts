import { randomBytes } from "node:crypto";
import { createServer, type ServerHttp2Stream } from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import pg from "pg";
import {
  EvaluateBatchResponseSchema,
  EvaluateResponseSchema,
} from "../gen/traitgate/policy/v1/policy_pb.js";
import { grpcFrame } from "./grpc-client.js";
import { requestMessages, serviceBatches, serviceRequests } from "./policy-frames.js";
import { oracleAnswer, serviceWorkload } from "./policy-workload.js";

/**
 * The policy service benchmark's floor: the least a gRPC policy service on Node.js can do for
 * the benchmark's calls, as the bare Node.js proxy is the gateway's. A `node:http2` server
 * (h2c) reads each call and answers it from a table made at start, keyed by the request's
 * bytes (the reference evaluator's decisions, so that the floor passes the same checks as
 * the servers): no authentication, validation, protobuf decoding, policy or log.
 *
 * "durable": each answer also waits until a row for the call is committed to PostgreSQL
 * (group commit: the rows of the calls that arrived while the previous statement ran are
 * inserted by one statement, its own transaction, as Traitgate's audit writer does) into a
 * table of a schema of its own. Each row about as large as Traitgate's decision record
 * (`pg_column_size` ≈ 360 bytes a unary call, ≈ 1,700 a batch of 50: the sizes its runs
 * measure); no hash chain, lock, values or index but the key. What Traitgate adds over this
 * is its own work.
 *
 *   node dist/bench/policy-floor.js <rules> bare|durable [postgres url]
 *     → tells its parent {url, schema?}; on "stop" (or when its parent goes) drops its schema,
 *       tells its rows (count and mean `pg_column_size` of each kind) and commits, and exits
 */

const rules = Number(process.argv[2] ?? "200");
const mode = process.argv[3] === "durable" ? "durable" : "bare";
const url = process.argv[4] ?? "postgres://postgres@127.0.0.1:5432/test";

const { workload: w } = serviceWorkload(rules);
const requests = serviceRequests(w);
const groups = serviceBatches(w);
const messages = requestMessages(requests, groups);
const decisions = requests.map((_, i) => (oracleAnswer(w, i) ? "allow" : "deny"));
const answers = new Map<string, Buffer>();
const key = (message: Uint8Array) => Buffer.from(message).toString("latin1");
messages.unary.forEach((message, i) => {
  const answer = create(EvaluateResponseSchema, { decision: decisions[i]! });
  answers.set(`U${key(message)}`, grpcFrame(toBinary(EvaluateResponseSchema, answer)));
});
messages.batch.forEach((message, b) => {
  const answer = create(EvaluateBatchResponseSchema, {
    decisions: groups[b]!.map((i) => create(EvaluateResponseSchema, { decision: decisions[i]! })),
  });
  answers.set(`B${key(message)}`, grpcFrame(toBinary(EvaluateBatchResponseSchema, answer)));
});
// The body's length in characters: the row's size less its header, id and time (44 bytes).
const kinds = {
  unary: { tag: "U", bodyChars: 360 - 44 },
  batch: { tag: "B", bodyChars: 1_700 - 44 },
};
const kindOfPath: Record<string, { tag: string; bodyChars: number }> = {
  "/traitgate.policy.v1.PolicyService/Evaluate": kinds.unary,
  "/traitgate.policy.v1.PolicyService/EvaluateBatch": kinds.batch,
};

/** Group commit of one row per call; each call's answer waits for its row. */
function durableRows(client: pg.Client) {
  const stats = { transactions: 0, largestGroup: 0, failed: 0 };
  let queue: { body: string; done: (ok: boolean) => void }[] = [];
  let writing = false;
  async function drain(): Promise<void> {
    while (queue.length > 0) {
      const group = queue;
      queue = [];
      stats.transactions++;
      stats.largestGroup = Math.max(stats.largestGroup, group.length);
      let ok = true;
      try {
        await client.query({
          name: "floor_insert",
          text: "INSERT INTO floor_rows (body) SELECT jsonb_array_elements_text($1::jsonb)",
          values: [JSON.stringify(group.map((row) => row.body))],
        });
      } catch (err) {
        ok = false;
        if (stats.failed++ === 0) process.stderr.write(`policy-floor: insert failed: ${err}\n`);
      }
      for (const row of group) row.done(ok);
    }
    writing = false;
  }
  return {
    stats,
    commit(body: string, done: (ok: boolean) => void) {
      queue.push({ body, done });
      if (writing) return;
      // Calls that end in this tick join the group.
      writing = true;
      queueMicrotask(() => void drain());
    },
  };
}

let client: pg.Client | undefined;
let schema: string | undefined;
let rows: ReturnType<typeof durableRows> | undefined;
let stopping = false;

async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (server.listening) server.close();
  let report = {};
  try {
    if (client !== undefined && schema !== undefined) {
      const { rows: counted } = await client.query<{
        unary: string;
        unary_bytes: number | null;
        batch: string;
        batch_bytes: number | null;
      }>(
        `SELECT count(*) FILTER (WHERE length(body) < ${kinds.batch.bodyChars}) AS unary,
           avg(pg_column_size(f.*)) FILTER (WHERE length(body) < ${kinds.batch.bodyChars})::float8 AS unary_bytes,
           count(*) FILTER (WHERE length(body) >= ${kinds.batch.bodyChars}) AS batch,
           avg(pg_column_size(f.*)) FILTER (WHERE length(body) >= ${kinds.batch.bodyChars})::float8 AS batch_bytes
         FROM floor_rows f`,
      );
      const c = counted[0];
      report = {
        unaryRows: Number(c?.unary ?? 0),
        unaryBytes: c?.unary_bytes ?? 0,
        batchRows: Number(c?.batch ?? 0),
        batchBytes: c?.batch_bytes ?? 0,
        ...rows?.stats,
      };
    }
  } finally {
    if (client !== undefined && schema !== undefined) {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
      await client.end().catch(() => {});
    }
  }
  if (process.connected) process.send?.(report, () => process.exit(0));
  else process.exit(0);
}
process.on("message", (message) => {
  if (message === "stop") void stop();
});
// The parent gone (killed with it, or interrupted): the schema dropped all the same.
process.on("disconnect", () => void stop());
process.on("SIGINT", () => void stop());
process.on("SIGTERM", () => void stop());

function answer(stream: ServerHttp2Stream, status: number, frame?: Buffer): void {
  if (stream.destroyed || stream.closed) return;
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": String(status) }));
  stream.end(frame);
}

const server = createServer();
server.on("stream", (stream, headers) => {
  const kind = kindOfPath[String(headers[":path"])];
  const chunks: Buffer[] = [];
  stream.on("data", (chunk: Buffer) => chunks.push(chunk));
  stream.on("error", () => {});
  stream.on("end", () => {
    if (!kind) return answer(stream, 12);
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const frame = answers.get(kind.tag + body.toString("latin1", 5));
    if (!frame) return answer(stream, 3);
    if (rows === undefined) return answer(stream, 0, frame);
    // The row: the request's first bytes in base64, padded to the row's size.
    const end = Math.min(body.length, 5 + Math.ceil((kind.bodyChars * 3) / 4));
    const row = body.toString("base64", 5, end).padEnd(kind.bodyChars, "=");
    rows.commit(row.slice(0, kind.bodyChars), (ok) =>
      ok ? answer(stream, 0, frame) : answer(stream, 14),
    );
  });
});

try {
  if (mode === "durable") {
    schema = `tg_bench_floor_${randomBytes(6).toString("hex")}`;
    client = new pg.Client({ connectionString: url, application_name: "traitgate-bench-floor" });
    await client.connect();
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(`SET search_path = ${schema}`);
    await client.query(
      "CREATE TABLE floor_rows (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), body text NOT NULL)",
    );
    rows = durableRows(client);
  }
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
} catch (err) {
  // Nothing told to the parent: it sees the exit. What was made is dropped first.
  process.stderr.write(`policy-floor: could not start: ${err}\n`);
  if (client !== undefined && schema !== undefined) {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
  }
  await client?.end().catch(() => {});
  process.exit(1);
}
const port = (server.address() as AddressInfo).port;
process.send?.({ url: `http://127.0.0.1:${port}`, ...(schema ? { schema } : {}) });
