import { readFileSync } from "node:fs";

/**
 * Where a server's CPU went, from a `--cpu-prof` profile (`BENCH_PROFILE_DIR` of
 * `npm run bench -- policy-service`, or `BENCH_CORE_NODE_ARGS=--cpu-prof` of the gateway
 * benchmark): docs/benchmarks.md's "Where the server's CPU goes" tables.
 *
 *   node dist/bench/profile-shares.js <file.cpuprofile> timeline
 *     each second of the profile: samples, idle, and busy samples under the policy service's
 *     `evaluate` and `evaluateBatch` handlers (to find a benchmark row's window);
 *   node dist/bench/profile-shares.js <file.cpuprofile> <from s> <to s>
 *     the busy samples of that window by area: each counted to the nearest frame above it
 *     that belongs to one of Traitgate's areas or a library, else to V8 or Node's own code.
 */

interface CallFrame {
  functionName: string;
  url: string;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Areas by the script a frame is in, first match wins. */
const areas: [RegExp, string][] = [
  [/src\/audit\//, "the audit record: recorder, writer, the statement's parameters"],
  [/src\/policy\/decision-(binary|message)/, "answers' encoding"],
  [/src\/policy\//, "the decisions: engine, derivations, subject check, handler"],
  [
    /src\/server\/(fast-validate|pattern-match|interceptors)|src\/(identity|metrics|apikeys)\/|prom-client|protovalidate/,
    "interceptors, validation, authentication, metrics",
  ],
  [/src\/gateway\//, "the gateway: checks, forward, operator_call record"],
  [/src\/server\/|connectrpc/, "gRPC/REST adapter, call record, access line"],
  [/node_modules\/(pg|pg-protocol|pg-pool)\/|src\/storage\//, "the pg driver and the pool"],
  [/@bufbuild\/protobuf/, "protobuf"],
];
const v8 = /^\((garbage collector|program)\)$|^runMicrotasks$/;

const [file, from, to] = process.argv.slice(2);
if (file === undefined || from === undefined) {
  console.error("usage: profile-shares <file.cpuprofile> (timeline | <from s> <to s>)");
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const seconds: number[] = [];
let at = profile.startTime;
profile.timeDeltas.forEach((delta) => {
  at += delta;
  seconds.push((at - profile.startTime) / 1e6);
});
const frames = function* (id: number) {
  for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) {
    yield (byId.get(x) as ProfileNode).callFrame;
  }
};

if (from === "timeline") {
  const rows = new Map<number, { all: number; idle: number; batch: number; unary: number }>();
  profile.samples.forEach((id, i) => {
    const second = Math.floor(seconds[i] as number);
    const row = rows.get(second) ?? { all: 0, idle: 0, batch: 0, unary: 0 };
    row.all++;
    const names = [...frames(id)].map((f) => f.functionName);
    if (names[0] === "(idle)") row.idle++;
    else if (names.includes("evaluateBatch")) row.batch++;
    else if (names.includes("evaluate")) row.unary++;
    rows.set(second, row);
  });
  console.log("second | samples | idle | under evaluateBatch | under evaluate");
  for (const [second, r] of [...rows].sort((a, b) => a[0] - b[0])) {
    console.log(`${second} | ${r.all} | ${r.idle} | ${r.batch} | ${r.unary}`);
  }
} else {
  const [start, end] = [Number(from), Number(to)];
  const counts = new Map<string, number>();
  let idle = 0;
  let total = 0;
  profile.samples.forEach((id, i) => {
    const second = seconds[i] as number;
    if (second < start || second >= end) return;
    total++;
    const leaf = (byId.get(id) as ProfileNode).callFrame;
    if (leaf.functionName === "(idle)") {
      idle++;
      return;
    }
    let area = v8.test(leaf.functionName) ? "V8: garbage collection, native code, microtasks" : "";
    for (const frame of area === "" ? frames(id) : []) {
      area = areas.find(([pattern]) => pattern.test(frame.url))?.[1] ?? "";
      if (area !== "") break;
    }
    area ||= "Node's HTTP/2, streams and sockets (no Traitgate frame above)";
    counts.set(area, (counts.get(area) ?? 0) + 1);
  });
  const busy = total - idle;
  console.log(`${total} samples, ${((100 * idle) / Math.max(total, 1)).toFixed(1)} % idle`);
  for (const [area, n] of [...counts].sort((a, b) => b[1] - a[1])) {
    console.log(`| ${area} | ${((100 * n) / Math.max(busy, 1)).toFixed(1)} % |`);
  }
}
