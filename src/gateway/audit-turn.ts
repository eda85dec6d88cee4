import type { AuditWriter } from "../audit/index.js";

/**
 * Hands the gateway's `operator_call` events to the audit writer once per turn of the
 * event loop instead of one at a time.
 *
 * The writer's group commit only joins the writes made in the same tick, and each gateway
 * call finishes in its own I/O callback: written directly, every event became a transaction
 * of its own (on the embedded database ~4 ms of the event loop each, the gateway's ceiling).
 * Queued here and written together from `setImmediate`, the events of every call that
 * finished in one turn share one transaction, and the answers of that turn go out before
 * the transaction starts. Each `write` still resolves or rejects with its own event's
 * outcome, so nothing about the audit changes but the grouping.
 */
export interface TurnAudit extends Pick<AuditWriter, "write"> {
  /** Writes what is queued now (before the writer closes). */
  flush(): void;
}

type Write = AuditWriter["write"];

export function writeOncePerTurn(audit: Pick<AuditWriter, "write">): TurnAudit {
  let queue: {
    event: Parameters<Write>[0];
    resolve: (v: Awaited<ReturnType<Write>>) => void;
    reject: (e: unknown) => void;
  }[] = [];
  let scheduled: NodeJS.Immediate | undefined;

  const flush = () => {
    if (scheduled !== undefined) clearImmediate(scheduled);
    scheduled = undefined;
    const batch = queue;
    queue = [];
    for (const pending of batch) {
      try {
        audit.write(pending.event).then(pending.resolve, pending.reject);
      } catch (err) {
        pending.reject(err);
      }
    }
  };

  return {
    write(event) {
      return new Promise((resolve, reject) => {
        queue.push({ event, resolve, reject });
        scheduled ??= setImmediate(flush);
      });
    },
    flush,
  };
}
