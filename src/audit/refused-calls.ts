import type { Logger } from "../log.js";
import type { RefusedCall } from "../server/interceptors.js";
import type { RequestOrigin } from "./event.js";
import {
  createRefusalSampler,
  type RefusalSamplerOptions,
  type RefusalSummary,
} from "./refusal-sampler.js";
import type { AuditWriter } from "./writer.js";

/** The refused-call hook, and `close` to write what the sampling still holds (shutdown). */
export interface RefusedCallsAudit {
  (call: RefusedCall): Promise<void>;
  close(): Promise<void>;
}

/**
 * Which refused calls the audit log keeps, and how: every refusal of a method that needs a
 * role or an API key (the administrative surface: a missing or bad token, a missing or bad
 * key, a missing role or scope), and every 403 anywhere. A plain 401 on a method any
 * signed-in user may call (an expired token on logout, say) is routine and is only logged by
 * the access line.
 *
 * Every `access_denied` event says in `details.count` how many refused calls it stands for.
 * Refusals of a known caller are always recorded, one event each (count 1). Anonymous
 * refusals (no valid token) are sampled per client address (src/audit/refusal-sampler.ts):
 * at most `perWindow` events of their own per address and window, and one more, at the end
 * of the window or on `close`, counting the rest.
 *
 * The event of a recorded refusal is committed before the refusal is answered; if it cannot
 * be, the caller gets the audit writer's `unavailable` error instead.
 */
export function auditRefusedCalls(
  audit: Pick<AuditWriter, "write">,
  options: {
    log?: Logger;
    sampling?: Omit<RefusalSamplerOptions, "summarize" | "onError">;
  } = {},
): RefusedCallsAudit {
  const sampler = createRefusalSampler({
    ...options.sampling,
    summarize: (summary) =>
      audit.write({
        actorType: "anonymous",
        action: "access_denied",
        target: singleTarget(summary),
        outcome: "denied",
        details: summaryDetails(summary),
      }),
    onError: summaryFailed(options.log, "access_denied"),
  });
  const hook = async (call: RefusedCall) => {
    const guarded = call.rule.roles.length > 0 || (call.rule.apiKeyScopes?.length ?? 0) > 0;
    if (!guarded && call.error.kind !== "permission_denied") return;
    const target = `rpc:${call.rpc}`;
    if (!call.caller && !sampler.take(call.clientAddress, target)) return;
    await audit.write({
      actorType: call.caller ? call.caller.kind : "anonymous",
      actorId: call.caller?.userId ?? null,
      action: "access_denied",
      target,
      outcome: "denied",
      requestId: call.requestId,
      origin: refusedCallOrigin(call),
      details: {
        reason: call.error.reason,
        client_address: call.clientAddress,
        count: 1,
        ...(call.apiKeyId ? { api_key_id: call.apiKeyId } : {}),
      },
    });
  };
  return Object.assign(hook, { close: () => sampler.close() });
}

/** Where a refused call came from. */
export const refusedCallOrigin = (call: RefusedCall): RequestOrigin => ({
  clientAddress: call.clientAddress,
  userAgent: call.userAgent,
});

/** The target of a summary: the one target its refusals had, else null (see `targets`). */
export function singleTarget(summary: RefusalSummary): string | null {
  const targets = Object.keys(summary.targets);
  return targets.length === 1 && targets[0] !== "other" ? (targets[0] ?? null) : null;
}

/** The details of a summary event (docs/audit.md, "Refused calls"). */
export function summaryDetails(summary: RefusalSummary): Record<string, unknown> {
  return {
    client_address: summary.address,
    count: summary.count,
    sampled_out: true,
    targets: summary.targets,
    first_at: summary.firstAt,
    last_at: summary.lastAt,
  };
}

/** Logs a summary that could not be written: its count, never more. */
export function summaryFailed(
  log: Logger | undefined,
  action: string,
): (err: unknown, summary: RefusalSummary) => void {
  return (err, summary) =>
    log?.error(
      {
        action,
        count: summary.count,
        error: err instanceof Error ? err.message : String(err),
      },
      "the count of sampled-out refusals could not be written to the audit log",
    );
}
