import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { type AuditEvent, AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Queryable } from "../storage/index.js";
import { type AuditChainState, createChainStateReader } from "./chain-state.js";
import type { CheckpointPublicKey } from "./checkpoint-keys.js";
import { type AuditEventRow, type AuditQuery, createAuditQuery } from "./query.js";

/** Thin Connect handlers for reading the audit log. */
export function createAuditService(
  query: AuditQuery,
  chainState: () => Promise<AuditChainState>,
): ServiceImpl<typeof AuditService> {
  return {
    async getAuditChainState() {
      const state = await chainState();
      const { checkpoint, verification: v } = state;
      return {
        headSeq: BigInt(state.head?.seq ?? 0),
        headHash: state.head?.hash ?? "",
        ...(checkpoint
          ? {
              checkpoint: {
                eventSeq: BigInt(checkpoint.eventSeq),
                // A forged row's seq or time may be anything: what is no int64 or no date
                // is left out (its status says what is wrong with it).
                signedSeq: int64OrZero(checkpoint.checkpoint?.seq),
                signedHash: checkpoint.checkpoint?.hash ?? "",
                ...(checkpoint.checkpoint && Number.isFinite(Date.parse(checkpoint.checkpoint.time))
                  ? { signedAt: timestampFromDate(new Date(checkpoint.checkpoint.time)) }
                  : {}),
                keyId: checkpoint.checkpoint?.keyId ?? "",
                status: checkpoint.status,
                message: checkpoint.message,
              },
            }
          : {}),
        verification: {
          state: v.state,
          start: v.start,
          startSeq: BigInt(v.startSeq),
          checked: BigInt(v.checked),
          unchecked: BigInt(v.unchecked),
          brokenSeq: BigInt(v.broken?.seq ?? 0),
          brokenReason: v.broken?.reason ?? "",
          brokenMessage: v.broken?.message ?? "",
        },
      };
    },
    async listAuditEvents(req) {
      const page = await query.list({
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        action: req.action,
        actorId: req.actorId,
        actorType: req.actorType,
        outcome: req.outcome,
        since: req.since ? timestampDate(req.since) : undefined,
        until: req.until ? timestampDate(req.until) : undefined,
      });
      return { events: page.events.map(toMessage), nextPageToken: page.nextPageToken };
    },
  };
}

function toMessage(event: AuditEventRow): Omit<AuditEvent, "$typeName"> {
  return {
    seq: BigInt(event.seq),
    eventId: event.id,
    occurredAt: timestampFromDate(event.occurredAt),
    actorType: event.actorType,
    actorId: event.actorId ?? "",
    action: event.action,
    target: event.target ?? "",
    outcome: event.outcome,
    requestId: event.requestId ?? "",
    clientAddress: event.clientAddress ?? "",
    userAgent: event.userAgent ?? "",
    details: event.details,
    prevHash: event.prevHash,
    hash: event.hash,
  };
}

/** How AuditService's methods are protected (also read by the OpenAPI generator). */
export const auditQueryAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>(
  AuditService.methods.map((m) => [
    `${AuditService.typeName}/${m.name}`,
    requireAuth({ roles: ["admin", "auditor"], apiKeyScopes: ["audit:read"] }),
  ]),
);

/**
 * Wires the audit query API: role `admin` or `auditor` and an API key with `audit:read`.
 * Reading is not audited (docs/audit.md, "Audit API").
 */
export function createAuditQueryModule(deps: {
  db: Queryable;
  /** The keys checkpoints are checked with (AUDIT_CHECKPOINT_KEY and the previous ones). */
  trustedCheckpointKeys: readonly CheckpointPublicKey[];
}): ServiceModule {
  const service = createAuditService(
    createAuditQuery(deps),
    createChainStateReader(deps.db, { trusted: deps.trustedCheckpointKeys }),
  );
  return {
    services: [AuditService],
    register: (router) => router.service(AuditService, service),
    authRules: auditQueryAuthRules,
  };
}

export { AuditService };

const maxInt64 = (1n << 63n) - 1n;

/** A decimal seq as an int64; 0 for anything else. */
function int64OrZero(seq: string | undefined): bigint {
  if (seq === undefined || !/^\d{1,19}$/.test(seq)) return 0n;
  const n = BigInt(seq);
  return n <= maxInt64 ? n : 0n;
}
