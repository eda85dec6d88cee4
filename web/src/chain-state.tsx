import {
  AuditService,
  type GetAuditChainStateResponse,
} from "../../gen/traitgate/admin/v1/audit_pb.js";
import { formatTime, useLoad } from "./load.js";
import { client } from "./rpc.js";
import { ErrorBox, Loading } from "./ui.js";

/**
 * The audit chain's state (Overview and Audit pages): the head, the newest signed checkpoint
 * and whether the chain verifies from it. The server bounds the check (GetAuditChainState).
 */
export function ChainState() {
  const [state, reload] = useLoad(() => client(AuditService).getAuditChainState({}));
  return (
    <section aria-labelledby="chain-title" class="card">
      <h2 id="chain-title">Audit chain</h2>
      {state.kind === "loading" ? <Loading what="the audit chain" /> : null}
      {state.kind === "error" ? <ErrorBox error={state.error} /> : null}
      {state.kind === "ready" ? <ChainDetails state={state.data} /> : null}
      <button type="button" class="secondary" onClick={reload}>
        Verify again
      </button>
    </section>
  );
}

function ChainDetails({ state }: { state: GetAuditChainStateResponse }) {
  const cp = state.checkpoint;
  const v = state.verification;
  return (
    <dl class="chain-state">
      <dt>Head</dt>
      <dd>
        {state.headSeq > 0n ? (
          <>
            event #{String(state.headSeq)}, hash <code>{state.headHash.slice(0, 16)}…</code>
          </>
        ) : (
          "no event yet"
        )}
      </dd>
      <dt>Newest signed checkpoint</dt>
      <dd id="chain-checkpoint" class={cp && cp.status !== "valid" ? "bad" : undefined}>
        {cp === undefined
          ? "none (AUDIT_CHECKPOINT_KEY unset, or none written yet)"
          : cp.status === "valid"
            ? `valid: signs event #${cp.signedSeq} at ${formatTime(cp.signedAt?.seconds)} UTC (key ${cp.keyId})`
            : `not trusted (${cp.status}): ${cp.message}`}
      </dd>
      <dt>Verification</dt>
      <dd id="chain-verification" class={v?.state === "broken" ? "bad" : "ok"}>
        {v ? verificationText(v) : ""}
      </dd>
    </dl>
  );
}

function verificationText(v: NonNullable<GetAuditChainStateResponse["verification"]>): string {
  const from =
    v.start === "checkpoint"
      ? `after the signed checkpoint's head (event #${v.startSeq})`
      : "from the first event (no valid signed checkpoint to start from)";
  const events = (n: bigint) => `${n} event${n === 1n ? "" : "s"}`;
  switch (v.state) {
    case "verified":
      return `Verified: ${events(v.checked)} ${from}, up to the head.`;
    case "partial":
      return (
        `Partly verified: ${events(v.checked)} ${from} are intact; ${events(v.unchecked)} ` +
        "after them were not checked here (run traitgate audit verify)."
      );
    default:
      return (
        `Broken at event #${v.brokenSeq} (${v.brokenReason}): ${v.brokenMessage}. ` +
        `${events(v.checked)} ${from} verified before it.`
      );
  }
}
