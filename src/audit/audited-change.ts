import type { Queryable, Session } from "../storage/index.js";
import { type AuditEventInput, type AuditedRequest, requestFields } from "./event.js";
import type { AuditWriter } from "./writer.js";

/** What an administrative change did, and the event that records it. */
export interface ChangeDone<T> {
  result: T;
  event: Pick<AuditEventInput, "action" | "target" | "details">;
}

/**
 * The runner of an area's administrative changes: each runs in a transaction with its audit
 * event, and both commit or neither (an event that cannot be written rolls the change back,
 * and the writer's 503 AUDIT_UNAVAILABLE is the answer). `change` gets the area's store bound
 * to the transaction (and the transaction, for other stores it touches) and returns its
 * result and event; undefined means "no such thing", answered with `notFound()`.
 */
export function auditedChanges<A, Store>(deps: {
  db: Pick<Session, "transaction">;
  audit: Pick<AuditWriter, "writeIn">;
  /** The area's store on a transaction. */
  store: (tx: Queryable) => Store;
  /** The audit event's actor fields for the area's actor. */
  actorFields: (actor: A) => Pick<AuditEventInput, "actorType" | "actorId">;
  notFound: () => Error;
}) {
  return <T>(
    actor: A,
    meta: AuditedRequest,
    change: (store: Store, tx: Queryable) => Promise<ChangeDone<T> | undefined>,
  ): Promise<T> =>
    deps.db.transaction(async (tx) => {
      const done = await change(deps.store(tx), tx);
      if (done === undefined) throw deps.notFound();
      await deps.audit.writeIn(tx, {
        ...done.event,
        ...deps.actorFields(actor),
        outcome: "success",
        ...requestFields(meta),
      });
      return done.result;
    });
}
