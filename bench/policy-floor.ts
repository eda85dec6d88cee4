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
 * (group commit: the rows of the calls waiting are inserted by one statement in one
 * transaction, as Traitgate's audit writer does, into a table of a schema of its own; the row
 * as large as Traitgate's decision record: 360 bytes a decision, 1,700 a batch of 50). No
 * hash chain, lock, values or indexes but the key. What Traitgate adds over this row is its
 * own work.
 *
 *   node dist/bench/policy-floor.js <rules> bare|durable [postgres url]
 *     → tells its parent {url, schema?}; on "stop" drops its schema, tells {rows}, exits
 */

const rules = Number(process.argv[2] ?? "200");
const mode = process.argv[3] === "durable" ? "durable" : "bare";
const url = process.argv[4] ?? "postgres://postgres@127.0.0.1:5432/test";

const { workload: w } = serviceWorkload(rules);
const requests = serviceRequests(w);
const groups = serviceBatches(w);
const messages = requestMessages(requests, groups);
const decision = (i: number) => (oracleAnswer(w, i) ? "allow" : "deny");
const answers = new Map<string, Buffer>();
const key = (message: Uint8Array) => Buffer.from(message).toString("latin1");
messages.unary.forEach((message, i) => {
  const answer = create(EvaluateResponseSchema, { decision: decision(i) });
  answers.set(`U${key(message)}`, grpcFrame(toBinary(EvaluateResponseSchema, answer)));
});
messages.batch.forEach((message, b) => {
  const answer = create(EvaluateBatchResponseSchema, {
    decisions: groups[b]!.map((i) => create(EvaluateResponseSchema, { decision: decision(i) })),
  });
  answers.set(`B${key(message)}`, grpcFrame(toBinary(EvaluateBatchResponseSchema, answer)));
});
const kinds: Record<string, { tag: string; rowBytes: number }> = {
  "/traitgate.policy.v1.PolicyService/Evaluate": { tag: "U", rowBytes: 360 },
  "/traitgate.policy.v1.PolicyService/EvaluateBatch": { tag: "B", rowBytes: 1_700 },
};

/** Group commit of one row per call; each call's answer waits for its row. */
function durableRows(client: pg.Client) {
  let queue: { body: string; done: (err?: Error) => void }[] = [];
  let writing = false;
  async function drain(): Promise<void> {
    writing = true;
    while (queue.length > 0) {
      const group = queue;
      queue = [];
      try {
        await client.query({
          name: "floor_insert",
          text: "INSERT INTO floor_rows (body) SELECT jsonb_array_elements_text($1::jsonb)",
          values: [JSON.stringify(group.map((row) => row.body))],
        });
        for (const row of group) row.done();
      } catch (err) {
        for (const row of group) row.done(err as Error);
      }
    }
    writing = false;
  }
  return (body: string, done: (err?: Error) => void) => {
    queue.push({ body, done });
    if (!writing) queueMicrotask(() => void drain());
  };
}

let client: pg.Client | undefined;
let schema: string | undefined;
let commit: ReturnType<typeof durableRows> | undefined;
if (mode === "durable") {
  schema = `tg_bench_floor_${randomBytes(6).toString("hex")}`;
  client = new pg.Client({ connectionString: url, application_name: "traitgate-bench-floor" });
  await client.connect();
  await client.query(`CREATE SCHEMA ${schema}`);
  await client.query(`SET search_path = ${schema}`);
  await client.query(
    "CREATE TABLE floor_rows (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), body text NOT NULL)",
  );
  commit = durableRows(client);
}

function answer(stream: ServerHttp2Stream, status: number, frame?: Buffer): void {
  if (stream.destroyed) return;
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": String(status) }));
  stream.end(frame);
}

const server = createServer();
server.on("stream", (stream, headers) => {
  const kind = kinds[String(headers[":path"])];
  const chunks: Buffer[] = [];
  stream.on("data", (chunk: Buffer) => chunks.push(chunk));
  stream.on("error", () => {});
  stream.on("end", () => {
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const frame = kind && answers.get(kind.tag + body.toString("latin1", 5));
    if (!kind) return answer(stream, 12);
    if (!frame) return answer(stream, 3);
    if (commit === undefined) return answer(stream, 0, frame);
    const row = body.toString("base64", 5).padEnd(kind.rowBytes, "=").slice(0, kind.rowBytes);
    commit(row, (err) => answer(stream, err ? 14 : 0, err ? undefined : frame));
  });
});
server.listen(0, "127.0.0.1", () => {
  const port = (server.address() as AddressInfo).port;
  process.send?.({ url: `http://127.0.0.1:${port}`, ...(schema ? { schema } : {}) });
});

async function stop(): Promise<void> {
  server.close();
  let rows = 0;
  if (client !== undefined && schema !== undefined) {
    const { rows: counted } = await client.query<{ n: string }>(
      "SELECT count(*) AS n FROM floor_rows",
    );
    rows = Number(counted[0]?.n ?? 0);
    await client.query(`DROP SCHEMA ${schema} CASCADE`);
    await client.end();
  }
  process.send?.({ rows });
  process.exit(0);
}
process.on("message", (message) => {
  if (message === "stop") void stop();
});
// The parent gone (killed with it): the schema dropped all the same.
process.on("disconnect", () => void stop());
