import { create, toBinary } from "@bufbuild/protobuf";
import {
  EvaluateBatchRequestSchema,
  EvaluateRequestSchema,
} from "../gen/traitgate/policy/v1/policy_pb.js";
import { traitgateRequest, type Workload } from "./policy-workload.js";

/**
 * The policy service benchmark's calls as the minimal client sends them, shared by the load
 * generator (bench/policy-service.ts) and the Node.js floor (bench/policy-floor.ts), which
 * answers them by their bytes: both encode them here, the same way.
 */

/** Requests in an EvaluateBatch call of the benchmark. */
export const batchSize = 50;

export type EvaluateRequestShape = {
  traits: string[];
  context: ReturnType<typeof traitgateRequest>["context"];
};

/** Each of the workload's requests as the service takes it. */
export function serviceRequests(w: Workload): EvaluateRequestShape[] {
  return w.requests.map((_, i) => {
    const r = traitgateRequest(w, i);
    return { traits: [...r.traits], context: r.context };
  });
}

/** Requests grouped by user, in chunks of 50: a Cerbos batch has one principal. */
export function serviceBatches(w: Workload): number[][] {
  const byUser = new Map<number, number[]>();
  w.requests.forEach(([u], i) => {
    const list = byUser.get(u) ?? [];
    list.push(i);
    byUser.set(u, list);
  });
  const out: number[][] = [];
  for (const list of byUser.values()) {
    for (let k = 0; k < list.length; k += batchSize) out.push(list.slice(k, k + batchSize));
  }
  return out.filter((b) => b.length === batchSize);
}

/** The Evaluate and EvaluateBatch request messages, encoded once. */
export function requestMessages(
  requests: readonly EvaluateRequestShape[],
  groups: readonly (readonly number[])[],
): { unary: Uint8Array[]; batch: Uint8Array[] } {
  return {
    unary: requests.map((r) => toBinary(EvaluateRequestSchema, create(EvaluateRequestSchema, r))),
    batch: groups.map((group) =>
      toBinary(
        EvaluateBatchRequestSchema,
        create(EvaluateBatchRequestSchema, { requests: group.map((i) => requests[i]!) }),
      ),
    ),
  };
}
