import { useState } from "preact/hooks";
import {
  type Plugin,
  type PluginReachability,
  PluginRegistryService,
} from "../../../gen/traitgate/gateway/v1/gateway_pb.js";
import { formatTime, type Loaded, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { Reachability, useReachability } from "../reachability.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ConfirmButton, ShownOnce } from "../shown-once.js";
import { Empty, ErrorBox, Loading } from "../ui.js";
import { Allowlist } from "./allowlist.js";
import { type Credentials, Register } from "./plugin-register.js";

/** Plugins: register from a manifest, credentials shown once, enable/disable, rotate, delete. */
export function PluginsPage(props: PageProps) {
  const registry = client(PluginRegistryService);
  const [list, reloadList] = useLoad(() => registry.listPlugins({}));
  const [reach, recheck] = useReachability();
  const reload = () => {
    reloadList();
    recheck();
  };
  const [credentials, setCredentials] = useState<Credentials | undefined>();
  const [error, setError] = useState<ShownError | undefined>();
  const writable = props.can("plugins:write");

  const act = async (fn: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await fn();
      reload();
    } catch (err) {
      setError(shownError(err));
    }
  };

  return (
    <div>
      {!writable ? <p class="notice">Read-only: your API key lacks plugins:write.</p> : null}
      {credentials ? (
        <ShownOnce
          title={`Credentials of ${credentials.pluginId}.`}
          secrets={[
            { label: "Credential", value: credentials.credential, id: "plugin-credential" },
            { label: "Core secret", value: credentials.coreSecret, id: "plugin-core-secret" },
          ]}
          onDone={() => setCredentials(undefined)}
        />
      ) : null}
      {writable ? (
        <Register
          onRegistered={(c) => {
            setCredentials(c);
            reload();
          }}
        />
      ) : null}
      <section aria-labelledby="plugins-list-title">
        <h2 id="plugins-list-title">Registered plugins</h2>
        <button type="button" class="secondary" onClick={recheck}>
          Check reachability
        </button>
        {error ? <ErrorBox error={error} /> : null}
        {list.kind === "loading" ? <Loading what="the plugins" /> : null}
        {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
        {list.kind === "ready" && list.data.plugins.length === 0 ? (
          <Empty>No plugin is registered.</Empty>
        ) : null}
        {list.kind === "ready" && list.data.plugins.length > 0 ? (
          <table>
            <thead>
              <tr>
                <th scope="col">Id</th>
                <th scope="col">Type</th>
                <th scope="col">Address</th>
                <th scope="col">Operations</th>
                <th scope="col">State</th>
                <th scope="col">Reachability</th>
                <th scope="col">Credentials issued</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.data.plugins.map((p) => (
                <PluginRow
                  key={p.manifest?.id}
                  plugin={p}
                  reach={reach}
                  writable={writable}
                  act={act}
                  onCredentials={setCredentials}
                />
              ))}
            </tbody>
          </table>
        ) : null}
      </section>
      {props.can("operator:read") ? (
        <Allowlist writable={props.can("operator:write")} />
      ) : (
        <p class="notice">The operator allowlist needs the key scope operator:read.</p>
      )}
    </div>
  );
}

function PluginRow(props: {
  plugin: Plugin;
  reach: Loaded<Map<string, PluginReachability>>;
  writable: boolean;
  act: (fn: () => Promise<unknown>) => Promise<void>;
  onCredentials: (c: Credentials) => void;
}) {
  const registry = client(PluginRegistryService);
  const m = props.plugin.manifest;
  const id = m?.id ?? "";
  return (
    <tr>
      <th scope="row">
        {id}
        <div class="hint">{m?.name}</div>
      </th>
      <td>{m?.pluginType}</td>
      <td>
        <code>
          {m?.host}:{m?.port}
        </code>
        {props.plugin.unlistedHost ? <span class="badge">unlisted host</span> : null}
      </td>
      <td>{Object.keys(m?.endpoints ?? {}).join(", ")}</td>
      <td>{props.plugin.enabled ? "enabled" : "disabled"}</td>
      <td>
        <Reachability id={id} reach={props.reach} />
      </td>
      <td>{formatTime(props.plugin.credentialsIssuedAt?.seconds)}</td>
      <td class="actions">
        {props.writable ? (
          <>
            <button
              type="button"
              class="secondary"
              onClick={() =>
                void props.act(() =>
                  props.plugin.enabled
                    ? registry.disablePlugin({ pluginId: id })
                    : registry.enablePlugin({ pluginId: id }),
                )
              }
            >
              {props.plugin.enabled ? `Disable ${id}` : `Enable ${id}`}
            </button>{" "}
            <ConfirmButton
              label={`Rotate ${id}'s credentials`}
              confirm="Confirm rotation"
              onConfirm={() =>
                void props.act(async () => {
                  const r = await registry.rotatePluginCredentials({ pluginId: id });
                  props.onCredentials({
                    pluginId: id,
                    credential: r.credentials?.credential ?? "",
                    coreSecret: r.credentials?.coreSecret ?? "",
                  });
                })
              }
            />{" "}
            <ConfirmButton
              label={`Delete ${id}`}
              confirm="Confirm deletion"
              onConfirm={() => void props.act(() => registry.deletePlugin({ pluginId: id }))}
            />
          </>
        ) : null}
      </td>
    </tr>
  );
}
