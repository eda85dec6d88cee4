import type { RefusedCall } from "../server/interceptors.js";
import type { AuditWriter } from "./writer.js";

/**
 * Which refused calls the audit log keeps, and how: every refusal of a method
 * that needs a role or an API key (the administrative surface: a missing or
 * bad token, a missing or bad key, a missing role or scope), and every 403
 * anywhere. A plain 401 on a method any signed-in user may call (an expired
 * token on logout, say) is routine and is only logged by the access line.
 *
 * The event is committed before the refusal is answered; if it cannot be, the
 * caller gets the audit writer's `unavailable` error instead.
 */
export function auditRefusedCalls(
  audit: Pick<AuditWriter, "write">,
): (call: RefusedCall) => Promise<void> {
  return async (call) => {
    const guarded = call.rule.roles.length > 0 || (call.rule.apiKeyScopes?.length ?? 0) > 0;
    if (!guarded && call.error.kind !== "permission_denied") return;
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
      },
    });
  };
}
