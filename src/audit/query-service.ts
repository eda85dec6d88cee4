import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { type AuditEvent, AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import type { ServiceModule } from "../server/app.js";
import { type AuthRule, requireAuth } from "../server/interceptors.js";
import type { Queryable } from "../storage/index.js";
import { type AuditEventRow, type AuditQuery, createAuditQuery } from "./query.js";

/** Thin Connect handlers for reading the audit log. */
export function createAuditService(query: AuditQuery): ServiceImpl<typeof AuditService> {
  return {
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

/** How AuditService's method is protected (also read by the OpenAPI generator). */
export const auditQueryAuthRules: ReadonlyMap<string, AuthRule> = new Map<string, AuthRule>([
  [
    `${AuditService.typeName}/ListAuditEvents`,
    requireAuth({ roles: ["admin", "auditor"], apiKeyScopes: ["audit:read"] }),
  ],
]);

/**
 * Wires the audit query API: role `admin` or `auditor` and an API key with `audit:read`.
 * Reading is not audited (docs/audit.md, "Audit API").
 */
export function createAuditQueryModule(deps: { db: Queryable }): ServiceModule {
  const service = createAuditService(createAuditQuery(deps));
  return {
    services: [AuditService],
    register: (router) => router.service(AuditService, service),
    authRules: auditQueryAuthRules,
  };
}

export { AuditService };
