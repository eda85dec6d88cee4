import type { RefusedCall } from "../server/interceptors.js";
import type { AuditWriter } from "./writer.js";

/**
 * Which refused calls the audit log keeps, and how: every refusal of a method that needs a
 * role or an API key (the administrative surface: a missing or bad token, a missing or bad
 * key, a missing role or scope), and every 403 anywhere. A plain 401 on a method any
 * signed-in user may call (an expired token on logout, say) is routine and is only logged by
 * the access line.
 *
 * Anonymous refusals (no valid token) are sampled per client address, so that a flood from
 * one address cannot grow the append-only log without bound: at most `perWindow` events
 * per address per window, the next one recording how many were left out. Refusals of a
 * known caller are always recorded.
 *
 * The event is committed before the refusal is answered; if it cannot be, the caller gets
 * the audit writer's `unavailable` error instead.
 */
export function auditRefusedCalls(
  audit: Pick<AuditWriter, "write">,
  sampler: RefusalSampler = createRefusalSampler(),
): (call: RefusedCall) => Promise<void> {
  return async (call) => {
    const guarded = call.rule.roles.length > 0 || (call.rule.apiKeyScopes?.length ?? 0) > 0;
    if (!guarded && call.error.kind !== "permission_denied") return;
    const sample = call.caller ? { record: true, suppressed: 0 } : sampler(call.clientAddress);
    if (!sample.record) return;
    await audit.write({
      actorType: call.caller ? call.caller.kind : "anonymous",
      actorId: call.caller?.userId ?? null,
      action: "access_denied",
      target: `rpc:${call.rpc}`,
      outcome: "denied",
      requestId: call.requestId,
      details: {
        reason: call.error.reason,
        client_address: call.clientAddress,
        ...(call.apiKeyId ? { api_key_id: call.apiKeyId } : {}),
        ...(sample.suppressed > 0 ? { suppressed_before: sample.suppressed } : {}),
      },
    });
  };
}

/** Should an anonymous refusal from this address be recorded, and how many were not since? */
export type RefusalSampler = (address: string) => { record: boolean; suppressed: number };

export function createRefusalSampler(
  options: {
    perWindow?: number;
    windowMs?: number;
    maxAddresses?: number;
    clock?: { now(): number };
  } = {},
): RefusalSampler {
  const perWindow = options.perWindow ?? 20;
  const windowMs = options.windowMs ?? 60_000;
  const maxAddresses = options.maxAddresses ?? 10_000;
  const clock = options.clock ?? { now: () => Date.now() };
  const seen = new Map<string, { start: number; recorded: number; suppressed: number }>();
  return (address) => {
    const now = clock.now();
    let entry = seen.get(address);
    if (entry === undefined || now - entry.start >= windowMs) {
      const suppressed = entry?.suppressed ?? 0;
      if (entry === undefined && seen.size >= maxAddresses) {
        const oldest = seen.keys().next().value;
        if (oldest !== undefined) seen.delete(oldest);
      }
      entry = { start: now, recorded: 0, suppressed };
      seen.delete(address);
      seen.set(address, entry);
    }
    if (entry.recorded >= perWindow) {
      entry.suppressed++;
      return { record: false, suppressed: 0 };
    }
    entry.recorded++;
    const suppressed = entry.suppressed;
    entry.suppressed = 0;
    return { record: true, suppressed };
  };
}
