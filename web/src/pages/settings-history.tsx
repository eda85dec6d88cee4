import { toJson } from "@bufbuild/protobuf";
import type { Value } from "@bufbuild/protobuf/wkt";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { SettingsService } from "../../../gen/traitgate/settings/v1/settings_pb.js";
import { formatTime, useLoad } from "../load.js";
import { client } from "../rpc.js";
import { Empty, ErrorBox, Loading } from "../ui.js";

const show = (v: Value | undefined) => (v ? JSON.stringify(toJson(ValueSchema, v)) : "—");

/** The last changes with before and after (secrets as the server redacts them). */
export function SettingsHistory({ round }: { round: number }) {
  const [history] = useLoad(
    () => client(SettingsService).getSettingsHistory({ pageSize: 20 }),
    [round],
  );
  return (
    <section aria-labelledby="history-title">
      <h2 id="history-title">History</h2>
      {history.kind === "loading" ? <Loading what="the history" /> : null}
      {history.kind === "error" ? <ErrorBox error={history.error} /> : null}
      {history.kind === "ready" && history.data.updates.length === 0 ? (
        <Empty>No change yet.</Empty>
      ) : null}
      {history.kind === "ready" && history.data.updates.length > 0 ? (
        <table>
          <thead>
            <tr>
              <th scope="col">Version</th>
              <th scope="col">When</th>
              <th scope="col">Who</th>
              <th scope="col">Changes</th>
            </tr>
          </thead>
          <tbody>
            {history.data.updates.map((u) => (
              <tr key={String(u.version)}>
                <td>{String(u.version)}</td>
                <td>{formatTime(u.updatedAt?.seconds)}</td>
                <td>{u.updatedBy}</td>
                <td>
                  {u.changes.map((c) => (
                    <div key={c.key}>
                      <code>{c.key}</code>: {show(c.before)} → {show(c.after)}
                    </div>
                  ))}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}
