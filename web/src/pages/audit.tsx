import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { useState } from "preact/hooks";
import {
  type AuditEvent,
  AuditService,
  type ListAuditEventsRequestSchema,
} from "../../../gen/traitgate/admin/v1/audit_pb.js";
import { ChainState } from "../chain-state.js";
import { formatTime, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { Empty, ErrorBox, Loading } from "../ui.js";

interface Filters {
  action: string;
  actorId: string;
  outcome: string;
  since: string;
  until: string;
}

const none: Filters = { action: "", actorId: "", outcome: "", since: "", until: "" };

function request(
  f: Filters,
  pageToken = "",
  pageSize = 50,
): MessageInitShape<typeof ListAuditEventsRequestSchema> {
  return {
    pageSize,
    pageToken,
    action: f.action.trim(),
    actorId: f.actorId.trim(),
    outcome: f.outcome,
    ...(f.since ? { since: timestampFromDate(new Date(f.since)) } : {}),
    ...(f.until ? { until: timestampFromDate(new Date(f.until)) } : {}),
  };
}

/** The audit log: the chain's verification state, filters, pages, an event's detail, export. */
export function AuditPage(_: PageProps) {
  const audit = client(AuditService);
  const [draft, setDraft] = useState<Filters>(none);
  const [filters, setFilters] = useState<Filters>(none);
  const [tokens, setTokens] = useState<string[]>([""]);
  const [open, setOpen] = useState<AuditEvent | undefined>();
  const [exportError, setExportError] = useState<ShownError | undefined>();
  const token = tokens[tokens.length - 1] ?? "";
  const [page] = useLoad(() => audit.listAuditEvents(request(filters, token)), [filters, token]);

  const input = (name: keyof Filters, label: string, type = "text") => (
    <div class="field inline">
      <label for={`audit-${name}`}>{label}</label>
      <input
        id={`audit-${name}`}
        type={type}
        value={draft[name]}
        onInput={(e) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value })}
      />
    </div>
  );

  async function exportLines() {
    setExportError(undefined);
    try {
      const lines: string[] = [];
      let next = "";
      do {
        const res = await audit.listAuditEvents(request(filters, next, 1000));
        for (const e of res.events) lines.push(JSON.stringify(eventJson(e)));
        next = res.nextPageToken;
      } while (next !== "" && lines.length < 100_000);
      const url = URL.createObjectURL(
        new Blob([`${lines.join("\n")}\n`], { type: "application/x-ndjson" }),
      );
      const a = document.createElement("a");
      a.href = url;
      a.download = "audit.jsonl";
      a.click();
      URL.revokeObjectURL(url);
    } catch (err) {
      setExportError(shownError(err));
    }
  }

  return (
    <div>
      <ChainState />
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters(draft);
          setTokens([""]);
        }}
      >
        {input("action", "Action")}
        {input("actorId", "Actor id")}
        <div class="field inline">
          <label for="audit-outcome">Outcome</label>
          <select
            id="audit-outcome"
            value={draft.outcome}
            onChange={(e) =>
              setDraft({ ...draft, outcome: (e.currentTarget as HTMLSelectElement).value })
            }
          >
            <option value="">any</option>
            <option value="success">success</option>
            <option value="failure">failure</option>
            <option value="denied">denied</option>
            <option value="error">error</option>
          </select>
        </div>
        {input("since", "Since", "datetime-local")}
        {input("until", "Until", "datetime-local")}
        <button type="submit">Filter</button>{" "}
        <button type="button" class="secondary" onClick={() => void exportLines()}>
          Export as JSON lines
        </button>
      </form>
      {exportError ? <ErrorBox error={exportError} title="Export failed" /> : null}
      {page.kind === "loading" ? <Loading what="events" /> : null}
      {page.kind === "error" ? <ErrorBox error={page.error} /> : null}
      {page.kind === "ready" && page.data.events.length === 0 ? (
        <Empty>No event matches.</Empty>
      ) : null}
      {page.kind === "ready" && page.data.events.length > 0 ? (
        <>
          <table class="events">
            <thead>
              <tr>
                <th scope="col">#</th>
                <th scope="col">When (UTC)</th>
                <th scope="col">Action</th>
                <th scope="col">Actor</th>
                <th scope="col">Target</th>
                <th scope="col">Outcome</th>
                <th scope="col">Client</th>
              </tr>
            </thead>
            <tbody>
              {page.data.events.map((e) => (
                <tr key={e.eventId}>
                  <td>
                    <button
                      type="button"
                      class="link"
                      onClick={() => setOpen(e)}
                      aria-label={`Event ${e.seq} details`}
                    >
                      {String(e.seq)}
                    </button>
                  </td>
                  <td>{formatTime(e.occurredAt?.seconds)}</td>
                  <td>{e.action}</td>
                  <td>
                    {e.actorType} {e.actorId}
                  </td>
                  <td>{e.target}</td>
                  <td class={`outcome-${e.outcome}`}>{e.outcome}</td>
                  <td title={e.userAgent}>
                    {e.clientAddress ||
                      String((e.details as JsonObject | undefined)?.client_address ?? "")}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <div class="pager">
            <button
              type="button"
              class="secondary"
              disabled={tokens.length <= 1}
              onClick={() => setTokens(tokens.slice(0, -1))}
            >
              Newer
            </button>{" "}
            <button
              type="button"
              class="secondary"
              disabled={page.data.nextPageToken === ""}
              onClick={() => setTokens([...tokens, page.data.nextPageToken])}
            >
              Older
            </button>
          </div>
        </>
      ) : null}
      {open ? <EventDetail event={open} onClose={() => setOpen(undefined)} /> : null}
    </div>
  );
}

function eventJson(e: AuditEvent) {
  return {
    seq: String(e.seq),
    event_id: e.eventId,
    occurred_at: e.occurredAt
      ? new Date(Number(e.occurredAt.seconds) * 1000 + e.occurredAt.nanos / 1e6).toISOString()
      : "",
    actor_type: e.actorType,
    actor_id: e.actorId,
    action: e.action,
    target: e.target,
    outcome: e.outcome,
    request_id: e.requestId,
    details: e.details ?? {},
    prev_hash: e.prevHash,
    hash: e.hash,
  };
}

function EventDetail({ event, onClose }: { event: AuditEvent; onClose: () => void }) {
  return (
    <section class="detail" aria-labelledby="event-title">
      <h2 id="event-title" tabIndex={-1} ref={(el) => el?.focus()}>
        Event {String(event.seq)}
      </h2>
      <pre>{JSON.stringify(eventJson(event), null, 2)}</pre>
      <button type="button" onClick={onClose}>
        Close
      </button>
    </section>
  );
}
