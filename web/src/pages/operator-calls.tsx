import { useEffect, useRef, useState } from "preact/hooks";
import { GatewayService, type OperatorCall } from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import { formatTime } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { Empty, ErrorBox } from "../ui.js";

const keep = 200;

/** Gateway calls as they happen (WatchOperatorCalls, a server stream), newest first, with pause. */
export function OperatorCallsPage(_: PageProps) {
  const [calls, setCalls] = useState<OperatorCall[]>([]);
  const [paused, setPaused] = useState(false);
  const [state, setState] = useState<"connecting" | "live" | "ended">("connecting");
  const [error, setError] = useState<ShownError | undefined>();
  const held = useRef<OperatorCall[]>([]);
  const [heldCount, setHeldCount] = useState(0);
  const pausedRef = useRef(false);

  useEffect(() => {
    const abort = new AbortController();
    (async () => {
      try {
        const stream = client(GatewayService).watchOperatorCalls(
          { afterSeq: 0n },
          { signal: abort.signal },
        );
        setState("live");
        for await (const res of stream) {
          if (!res.call) continue;
          if (pausedRef.current) {
            held.current.push(res.call);
            setHeldCount(held.current.length);
          } else setCalls((prev) => [res.call as OperatorCall, ...prev].slice(0, keep));
        }
        setState("ended");
      } catch (err) {
        if (abort.signal.aborted) return;
        setError(shownError(err));
        setState("ended");
      }
    })();
    return () => abort.abort();
  }, []);

  const toggle = () => {
    const next = !paused;
    pausedRef.current = next;
    setPaused(next);
    if (!next) {
      const waiting = held.current.reverse();
      held.current = [];
      setHeldCount(0);
      setCalls((prev) => [...waiting, ...prev].slice(0, keep));
    }
  };

  return (
    <div>
      <p role="status" class={state === "live" ? "ok" : "notice"}>
        {state === "connecting"
          ? "Connecting…"
          : state === "live"
            ? paused
              ? `Paused: ${heldCount} new call${heldCount === 1 ? "" : "s"} held.`
              : "Live."
            : "The stream ended."}
      </p>
      <button type="button" onClick={toggle} aria-pressed={paused}>
        {paused ? "Resume" : "Pause"}
      </button>
      {error ? <ErrorBox error={error} /> : null}
      {calls.length === 0 ? <Empty>No call since this page opened.</Empty> : null}
      {calls.length > 0 ? (
        <table class="calls">
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">When (UTC)</th>
              <th scope="col">Caller</th>
              <th scope="col">Target</th>
              <th scope="col">Operation</th>
              <th scope="col">Outcome</th>
              <th scope="col">Status</th>
              <th scope="col">Latency (ms)</th>
            </tr>
          </thead>
          <tbody>
            {calls.map((c) => (
              <tr key={String(c.seq)}>
                <td>{String(c.seq)}</td>
                <td>{formatTime(c.occurredAt?.seconds)}</td>
                <td>{c.caller}</td>
                <td>{c.target}</td>
                <td>{c.operation}</td>
                <td class={`outcome-${c.outcome}`}>
                  {c.outcome}
                  {c.reason ? ` (${c.reason})` : ""}
                </td>
                <td>{c.status}</td>
                <td>{c.latencyMs.toFixed(1)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </div>
  );
}
