import { useState } from "preact/hooks";
import {
  type ServiceAccount,
  ServiceAccountAdminService,
} from "../../../gen/traitgate/identity/v1/service_accounts_pb.js";
import { formatTime, useLoad } from "../load.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ConfirmButton, ShownOnce } from "../shown-once.js";
import { Empty, ErrorBox, Field, fieldError, formError, Loading } from "../ui.js";

/** Service accounts: list, create (secret shown once), rotate the secret, deactivate, delete. */
export function ServiceAccounts({ writable }: { writable: boolean }) {
  const accounts = client(ServiceAccountAdminService);
  const [list, reload] = useLoad(() => accounts.listServiceAccounts({ pageSize: 100 }));
  const [secret, setSecret] = useState<{ name: string; value: string } | undefined>();
  const [error, setError] = useState<ShownError | undefined>();
  const [form, setForm] = useState({ name: "", description: "", roles: "service" });
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
    <section aria-labelledby="accounts-title">
      <h2 id="accounts-title">Service accounts</h2>
      {secret ? (
        <ShownOnce
          title={`Client secret of ${secret.name}.`}
          secrets={[{ label: "Client secret", value: secret.value, id: "client-secret" }]}
          onDone={() => setSecret(undefined)}
        />
      ) : null}
      {writable ? (
        <form
          onSubmit={async (e) => {
            e.preventDefault();
            setError(undefined);
            try {
              const r = await accounts.createServiceAccount({
                ...form,
                roles: form.roles.split(/[\s,]+/).filter(Boolean),
              });
              setSecret({ name: r.serviceAccount?.name ?? "", value: r.clientSecret });
              setForm({ name: "", description: "", roles: "service" });
              reload();
            } catch (err) {
              setError(shownError(err));
            }
          }}
        >
          {formError(error, ["name", "description", "roles"])}
          <Field
            id="sa-name"
            label="Name"
            value={form.name}
            onInput={(v) => setForm({ ...form, name: v })}
            error={fieldError(error, "name")}
            hint="Its client id, e.g. ai-core."
          />
          <Field
            id="sa-description"
            label="Description"
            value={form.description}
            onInput={(v) => setForm({ ...form, description: v })}
            error={fieldError(error, "description")}
          />
          <Field
            id="sa-roles"
            label="Roles"
            value={form.roles}
            onInput={(v) => setForm({ ...form, roles: v })}
            error={fieldError(error, "roles")}
          />
          <button type="submit">Create service account</button>
        </form>
      ) : (
        <p class="notice">Read-only: your API key lacks service_accounts:write.</p>
      )}
      {list.kind === "loading" ? <Loading what="service accounts" /> : null}
      {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
      {list.kind === "ready" && list.data.serviceAccounts.length === 0 ? (
        <Empty>No service account yet.</Empty>
      ) : null}
      {list.kind === "ready" && list.data.serviceAccounts.length > 0 ? (
        <table>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Roles</th>
              <th scope="col">State</th>
              <th scope="col">Secret issued</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {list.data.serviceAccounts.map((a) => (
              <AccountRow
                key={a.serviceAccountId}
                account={a}
                writable={writable}
                act={act}
                onSecret={setSecret}
              />
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}

function AccountRow(props: {
  account: ServiceAccount;
  writable: boolean;
  act: (fn: () => Promise<unknown>) => Promise<void>;
  onSecret: (s: { name: string; value: string }) => void;
}) {
  const a = props.account;
  const accounts = client(ServiceAccountAdminService);
  const id = a.serviceAccountId;
  return (
    <tr>
      <th scope="row">
        {a.name}
        <div class="hint">{a.description}</div>
      </th>
      <td>{a.roles.join(", ")}</td>
      <td>{a.isActive ? "active" : "deactivated"}</td>
      <td>{formatTime(a.secretIssuedAt?.seconds)}</td>
      <td class="actions">
        {props.writable ? (
          <>
            <ConfirmButton
              label={`Rotate ${a.name}'s secret`}
              confirm="Confirm rotation"
              onConfirm={() =>
                void props.act(async () => {
                  const r = await accounts.rotateServiceAccountSecret({ serviceAccountId: id });
                  props.onSecret({ name: a.name, value: r.clientSecret });
                })
              }
            />{" "}
            <button
              type="button"
              class="secondary"
              onClick={() =>
                void props.act(() =>
                  accounts.updateServiceAccount({ serviceAccountId: id, isActive: !a.isActive }),
                )
              }
            >
              {a.isActive ? `Deactivate ${a.name}` : `Reactivate ${a.name}`}
            </button>{" "}
            <ConfirmButton
              label={`Delete ${a.name}`}
              confirm="Confirm deletion"
              onConfirm={() =>
                void props.act(() => accounts.deleteServiceAccount({ serviceAccountId: id }))
              }
            />
          </>
        ) : null}
      </td>
    </tr>
  );
}
