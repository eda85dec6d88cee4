import type { Engine, Workload } from "./policy-workload.js";

/**
 * The benchmark's peers (bench/peers/), loaded at run time: they depend on packages in
 * bench/node_modules (`npm --prefix bench ci`) and are compiled by bench/tsconfig.json, so
 * Traitgate's own typecheck and build never see them. Their shape is declared here.
 */
export interface CerbosPeer {
  version: string;
  /** The PDP's process id (for its CPU time). */
  pid: number;
  unary(i: number): Promise<boolean>;
  batch(indices: readonly number[]): Promise<boolean[]>;
  /** unary(i) over the minimal gRPC client (bench/grpc-client.ts), encoded beforehand. */
  rawUnary(i: number): Promise<boolean>;
  /** Batch b of those given to prepareBatches, over the minimal gRPC client. */
  rawBatch(b: number): Promise<boolean[]>;
  prepareBatches(groups: readonly (readonly number[])[]): void;
  /** The minimal client's calls from now on go over `n` connections in turn (1 at start). */
  rawConnections(n: number): void;
  close(): Promise<void>;
}

export interface Peers {
  cedarEngine(w: Workload): Engine;
  casbinEngine(w: Workload): Promise<Engine>;
  startCerbos(w: Workload, options?: { audit?: boolean }): Promise<CerbosPeer>;
}

/**
 * The peers, or why they could not be loaded. bench/tsconfig.json compiles them into
 * bench/dist/, beside bench/node_modules, where Node resolves their packages.
 */
export async function loadPeers(): Promise<Peers | { missing: string }> {
  const url = new URL("../../bench/dist/bench/peers/index.js", import.meta.url).href;
  try {
    return (await import(url)) as Peers;
  } catch (err) {
    return {
      missing: `benchmark peers not loaded (${(err as Error).message}); run \`npm --prefix bench ci && npx tsc -p bench/tsconfig.json\` or \`npm run bench\``,
    };
  }
}
