import {
  type PluginReachability,
  PluginRegistryService,
} from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { type Loaded, useLoad } from "./load.js";
import { client } from "./rpc.js";

/** Every registered plugin's reachability (CheckPluginReachability), by plugin id. */
export function useReachability(): [Loaded<Map<string, PluginReachability>>, () => void] {
  return useLoad(async () => {
    const r = await client(PluginRegistryService).checkPluginReachability({});
    return new Map(r.plugins.map((p) => [p.pluginId, p]));
  });
}

/** One plugin's reachability in words. */
export function Reachability(props: {
  id: string;
  reach: Loaded<Map<string, PluginReachability>>;
}) {
  const { reach } = props;
  if (reach.kind === "loading") return <span class="hint">checking…</span>;
  if (reach.kind === "error") return <span class="bad">not checked: {reach.error.message}</span>;
  const r = reach.data.get(props.id);
  if (r === undefined) return <span class="hint">not checked</span>;
  const text =
    r.state === "reachable"
      ? `reachable (HTTP ${r.httpStatus}, ${Math.round(r.latencyMs)} ms)`
      : r.state === "unhealthy"
        ? `unhealthy (its health check answered HTTP ${r.httpStatus})`
        : r.state === "refused"
          ? `refused: its address is one plugins may not be reached at (${r.detail})`
          : `${r.state}${r.detail ? ` (${r.detail})` : ""}`;
  return (
    <span class={r.state === "reachable" ? "ok reach" : "bad reach"} data-plugin={props.id}>
      {text}
    </span>
  );
}
