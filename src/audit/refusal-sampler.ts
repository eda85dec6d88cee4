/**
 * Sampling of anonymous refusals per client address, so that a flood from one address cannot
 * grow the append-only log without bound, without losing count: at most `perWindow` refusals
 * per address and window are recorded as events of their own; the others are counted, and
 * when the window ends (or the process shuts down) one summary records how many there were.
 * Every refusal is thus in exactly one event's `count`.
 */

/** The refusals of one address that were counted rather than recorded one by one. */
export interface RefusalSummary {
  address: string;
  count: number;
  /** Count per target (at most `maxTargets` of them; the rest under "other"). */
  targets: Record<string, number>;
  /** ISO 8601 times of the first and the last of them. */
  firstAt: string;
  lastAt: string;
}

export interface RefusalSampler {
  /**
   * true: record this refusal as an event of its own (it stands for itself, count 1);
   * false: it is counted, and recorded in the address's summary.
   */
  take(address: string, target: string): boolean;
  /** Writes the summaries of the windows that have ended (every pending one when `all`). */
  sweep(all?: boolean): Promise<void>;
  /**
   * Stops the sweeps and writes every pending summary. The summaries' writes are started
   * before it returns (an audit writer queues them at once); never rejects.
   */
  close(): Promise<void>;
}

export interface RefusalSamplerOptions {
  /** Records a summary; a rejection puts its count back, to be written by the next sweep. */
  summarize: (summary: RefusalSummary) => Promise<unknown>;
  /** Told when a summary could not be written (on close, its refusals stay uncounted). */
  onError?: (err: unknown, summary: RefusalSummary) => void;
  perWindow?: number;
  windowMs?: number;
  maxAddresses?: number;
  clock?: { now(): number };
  /** Sweep on a timer every quarter window (default true; tests call `sweep`). */
  timer?: boolean;
}

const maxTargets = 32;

interface Entry {
  start: number;
  recorded: number;
  counted: number;
  targets: Map<string, number>;
  firstAt: number;
  lastAt: number;
}

export function createRefusalSampler(options: RefusalSamplerOptions): RefusalSampler {
  const perWindow = options.perWindow ?? 20;
  const windowMs = options.windowMs ?? 60_000;
  const maxAddresses = options.maxAddresses ?? 10_000;
  const clock = options.clock ?? { now: () => Date.now() };
  const seen = new Map<string, Entry>();
  let closed = false;

  const newEntry = (now: number): Entry => ({
    start: now,
    recorded: 0,
    counted: 0,
    targets: new Map(),
    firstAt: now,
    lastAt: now,
  });

  const count = (entry: Entry, target: string, n: number, at: number) => {
    const key = entry.targets.has(target) || entry.targets.size < maxTargets ? target : "other";
    entry.targets.set(key, (entry.targets.get(key) ?? 0) + n);
    if (entry.counted === 0 || at < entry.firstAt) entry.firstAt = at;
    if (entry.counted === 0 || at > entry.lastAt) entry.lastAt = at;
    entry.counted += n;
  };

  /** Starts writing the entry's summary, if it counted any refusal. */
  const summarize = (address: string, entry: Entry): Promise<void> => {
    if (entry.counted === 0) return Promise.resolve();
    const summary: RefusalSummary = {
      address,
      count: entry.counted,
      targets: Object.fromEntries(entry.targets),
      firstAt: new Date(entry.firstAt).toISOString(),
      lastAt: new Date(entry.lastAt).toISOString(),
    };
    entry.counted = 0;
    entry.targets = new Map();
    let written: Promise<unknown>;
    try {
      written = options.summarize(summary);
    } catch (err) {
      written = Promise.reject(err);
    }
    return written.then(
      () => undefined,
      (err: unknown) => {
        options.onError?.(err, summary);
        if (closed) return;
        // Put the count back: the next sweep writes it.
        let back = seen.get(address);
        if (back === undefined) {
          back = newEntry(clock.now());
          seen.set(address, back);
        }
        for (const [target, n] of Object.entries(summary.targets)) {
          count(back, target, n, Date.parse(summary.firstAt));
        }
        back.lastAt = Math.max(back.lastAt, Date.parse(summary.lastAt));
      },
    );
  };

  const sweep = async (all = false) => {
    const now = clock.now();
    const writes: Promise<void>[] = [];
    for (const [address, entry] of seen) {
      if (all || now - entry.start >= windowMs) {
        seen.delete(address);
        writes.push(summarize(address, entry));
      }
    }
    await Promise.all(writes);
  };

  const timer = options.timer === false ? undefined : setInterval(() => void sweep(), windowMs / 4);
  timer?.unref();

  return {
    take(address, target) {
      const now = clock.now();
      let entry = seen.get(address);
      if (entry !== undefined && now - entry.start >= windowMs) {
        void summarize(address, entry);
        seen.delete(address);
        entry = undefined;
      }
      if (entry === undefined) {
        if (seen.size >= maxAddresses) {
          const [oldest, evicted] = seen.entries().next().value ?? [];
          if (oldest !== undefined && evicted !== undefined) {
            seen.delete(oldest);
            void summarize(oldest, evicted);
          }
        }
        entry = newEntry(now);
        seen.set(address, entry);
      }
      if (entry.recorded < perWindow) {
        entry.recorded++;
        return true;
      }
      count(entry, target, 1, now);
      return false;
    },
    sweep,
    async close() {
      if (timer !== undefined) clearInterval(timer);
      const writes = sweep(true);
      closed = true;
      await writes;
    },
  };
}
