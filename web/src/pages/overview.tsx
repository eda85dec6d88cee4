import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  Health,
  HealthCheckResponse_ServingStatus,
} from "../../../gen/grpc/health/v1/health_pb.js";
import { AuditService } from "../../../gen/traitgate/admin/v1/audit_pb.js";
import { PluginRegistryService } from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import { ChainState } from "../chain-state.js";
import { useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { Reachability, useReachability } from "../reachability.js";
import { client } from "../rpc.js";
import { Empty, ErrorBox, Loading } from "../ui.js";

const time = (t: { seconds: bigint; nanos: number } | undefined) =>
  t
    ? timestampDate(t as Parameters<typeof timestampDate>[0])
        .toISOString()
        .replace("T", " ")
        .slice(0, 19)
    : "";

/** Health, plugins and their reachability, the active policy version, the audit chain, recent refusals. */
export function OverviewPage({ session, shows }: PageProps) {
  const [health] = useLoad(() => client(Health).check({ service: "" }));
  return (
    <div class="overview">
      <section aria-labelledby="health-title" class="card">
        <h2 id="health-title">Core and database</h2>
        {health.kind === "loading" ? <Loading what="health" /> : null}
        {health.kind === "error" ? <ErrorBox error={health.error} /> : null}
        {health.kind === "ready" ? (
          <p
            class={health.data.status === HealthCheckResponse_ServingStatus.SERVING ? "ok" : "bad"}
          >
            {health.data.status === HealthCheckResponse_ServingStatus.SERVING
              ? "Serving: the core answers and its database too."
              : "Not serving: the database does not answer."}
          </p>
        ) : null}
      </section>
      <section aria-labelledby="policy-title" class="card">
        <h2 id="policy-title">Policy</h2>
        <p>
          Active version: <strong>{session.policy_version || "none"}</strong>
        </p>
      </section>
      {shows("plugins") ? <Plugins /> : null}
      {shows("audit") ? <AuditState /> : null}
    </div>
  );
}

function Plugins() {
  const [plugins] = useLoad(() => client(PluginRegistryService).listPlugins({}));
  const [reach] = useReachability();
  return (
    <section aria-labelledby="plugins-title" class="card">
      <h2 id="plugins-title">Plugins</h2>
      {plugins.kind === "loading" ? <Loading what="plugins" /> : null}
      {plugins.kind === "error" ? <ErrorBox error={plugins.error} /> : null}
      {plugins.kind === "ready" && plugins.data.plugins.length === 0 ? (
        <Empty>No plugin is registered.</Empty>
      ) : null}
      {plugins.kind === "ready" && plugins.data.plugins.length > 0 ? (
        <ul>
          {plugins.data.plugins.map((p) => (
            <li key={p.manifest?.id}>
              <strong>{p.manifest?.id}</strong> {p.enabled ? "enabled" : "disabled"},{" "}
              <Reachability id={p.manifest?.id ?? ""} reach={reach} />
            </li>
          ))}
        </ul>
      ) : null}
    </section>
  );
}

function AuditState() {
  const [state] = useLoad(() =>
    client(AuditService).listAuditEvents({ pageSize: 10, outcome: "denied" }),
  );
  return (
    <>
      <ChainState />
      <section aria-labelledby="refusals-title" class="card wide">
        <h2 id="refusals-title">Recent refusals</h2>
        {state.kind === "loading" ? <Loading what="recent refusals" /> : null}
        {state.kind === "error" ? <ErrorBox error={state.error} /> : null}
        {state.kind === "ready" && state.data.events.length === 0 ? (
          <Empty>No refusal recorded.</Empty>
        ) : null}
        {state.kind === "ready" && state.data.events.length > 0 ? (
          <table>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Action</th>
                <th scope="col">Actor</th>
                <th scope="col">Target</th>
              </tr>
            </thead>
            <tbody>
              {state.data.events.map((e) => (
                <tr key={e.eventId}>
                  <td>{time(e.occurredAt)}</td>
                  <td>{e.action}</td>
                  <td>
                    {e.actorType} {e.actorId}
                  </td>
                  <td>{e.target}</td>
                </tr>
              ))}
            </tbody>
          </table>
        ) : null}
      </section>
    </>
  );
}
