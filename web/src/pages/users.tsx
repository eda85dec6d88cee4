import { useState } from "preact/hooks";
import { type User, UserAdminService } from "../../../gen/traitgate/identity/v1/user_admin_pb.js";
import { formatTime, useLoad } from "../load.js";
import type { PageProps } from "../pages.js";
import { client, type ShownError, shownError } from "../rpc.js";
import { ConfirmButton } from "../shown-once.js";
import { Empty, ErrorBox, Field, fieldError, formError, Loading } from "../ui.js";
import { ServiceAccounts } from "./service-accounts.js";

const roleList = (text: string) => text.split(/[\s,]+/).filter(Boolean);

/** Users (search, pages, create, roles, deactivate, reset MFA, set password) and service accounts. */
export function UsersPage({ can }: PageProps) {
  const users = client(UserAdminService);
  const [draft, setDraft] = useState("");
  const [q, setQ] = useState("");
  const [tokens, setTokens] = useState<string[]>([""]);
  const token = tokens[tokens.length - 1] ?? "";
  const [list, reload] = useLoad(
    () => users.listUsers({ q, pageToken: token, pageSize: 25 }),
    [q, token],
  );
  const [error, setError] = useState<ShownError | undefined>();
  const writable = can("users:write");
  const act = async (fn: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await fn();
      reload();
      return true;
    } catch (err) {
      setError(shownError(err));
      return false;
    }
  };
  return (
    <div>
      {!can("users:read") ? (
        <p class="notice">Your API key lacks users:read: the list is refused.</p>
      ) : null}
      {can("users:read") && !writable ? (
        <p class="notice">Read-only: your API key lacks users:write.</p>
      ) : null}
      {writable ? <CreateUser onCreated={reload} /> : null}
      <section aria-labelledby="users-title">
        <h2 id="users-title">Users</h2>
        <form
          class="filters"
          onSubmit={(e) => {
            e.preventDefault();
            setQ(draft.trim());
            setTokens([""]);
          }}
        >
          <div class="field inline">
            <label for="user-search">Username or email contains</label>
            <input
              id="user-search"
              value={draft}
              onInput={(e) => setDraft((e.currentTarget as HTMLInputElement).value)}
            />
          </div>
          <button type="submit">Search</button>
        </form>
        {error ? <ErrorBox error={error} /> : null}
        {list.kind === "loading" ? <Loading what="users" /> : null}
        {list.kind === "error" ? <ErrorBox error={list.error} /> : null}
        {list.kind === "ready" && list.data.users.length === 0 ? (
          <Empty>No user matches.</Empty>
        ) : null}
        {list.kind === "ready" && list.data.users.length > 0 ? (
          <>
            <table>
              <thead>
                <tr>
                  <th scope="col">Username</th>
                  <th scope="col">Roles</th>
                  <th scope="col">State</th>
                  <th scope="col">MFA</th>
                  <th scope="col">Created</th>
                  <th scope="col">Actions</th>
                </tr>
              </thead>
              <tbody>
                {list.data.users.map((u) => (
                  <UserRow key={u.userId} user={u} writable={writable} act={act} />
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
                Previous page
              </button>{" "}
              <button
                type="button"
                class="secondary"
                disabled={list.data.nextPageToken === ""}
                onClick={() => setTokens([...tokens, list.data.nextPageToken])}
              >
                Next page
              </button>
            </div>
          </>
        ) : null}
      </section>
      {can("service_accounts:read") ? (
        <ServiceAccounts writable={can("service_accounts:write")} />
      ) : (
        <p class="notice">Service accounts need the key scope service_accounts:read.</p>
      )}
    </div>
  );
}

function UserRow(props: {
  user: User;
  writable: boolean;
  act: (fn: () => Promise<unknown>) => Promise<boolean>;
}) {
  const u = props.user;
  const users = client(UserAdminService);
  const [editing, setEditing] = useState<"roles" | "password" | undefined>();
  const [value, setValue] = useState("");
  const id = `user-${u.userId}`;
  return (
    <tr>
      <th scope="row">
        {u.username}
        <div class="hint">{u.email}</div>
      </th>
      <td>{u.roles.join(", ") || "none"}</td>
      <td>{u.isActive ? "active" : "deactivated"}</td>
      <td>{u.mfaEnabled ? "on" : "off"}</td>
      <td>{formatTime(u.createdAt?.seconds)}</td>
      <td class="actions">
        {props.writable && editing === undefined ? (
          <>
            <button
              type="button"
              class="secondary"
              onClick={() => {
                setEditing("roles");
                setValue(u.roles.join(", "));
              }}
            >
              Roles of {u.username}
            </button>{" "}
            <button
              type="button"
              class="secondary"
              onClick={() => {
                setEditing("password");
                setValue("");
              }}
            >
              Set password of {u.username}
            </button>{" "}
            <button
              type="button"
              class="secondary"
              onClick={() =>
                void props.act(() => users.updateUser({ userId: u.userId, isActive: !u.isActive }))
              }
            >
              {u.isActive ? `Deactivate ${u.username}` : `Reactivate ${u.username}`}
            </button>{" "}
            {u.mfaEnabled ? (
              <ConfirmButton
                label={`Reset MFA of ${u.username}`}
                confirm="Confirm MFA reset"
                onConfirm={() => void props.act(() => users.resetUserMfa({ userId: u.userId }))}
              />
            ) : null}{" "}
            <ConfirmButton
              label={`Delete ${u.username}`}
              confirm="Confirm deletion"
              onConfirm={() => void props.act(() => users.deleteUser({ userId: u.userId }))}
            />
          </>
        ) : null}
        {editing !== undefined ? (
          <form
            class="inline-form"
            onSubmit={async (e) => {
              e.preventDefault();
              const ok = await props.act(() =>
                editing === "roles"
                  ? users.updateUser({ userId: u.userId, roles: { values: roleList(value) } })
                  : users.setUserPassword({ userId: u.userId, password: value }),
              );
              if (ok) setEditing(undefined);
            }}
          >
            <label for={`${id}-${editing}`}>
              {editing === "roles" ? `Roles of ${u.username}` : `New password of ${u.username}`}
            </label>{" "}
            <input
              id={`${id}-${editing}`}
              type={editing === "password" ? "password" : "text"}
              autocomplete={editing === "password" ? "new-password" : "off"}
              value={value}
              onInput={(e) => setValue((e.currentTarget as HTMLInputElement).value)}
            />{" "}
            <button type="submit">Save</button>{" "}
            <button type="button" class="secondary" onClick={() => setEditing(undefined)}>
              Cancel
            </button>
          </form>
        ) : null}
      </td>
    </tr>
  );
}

function CreateUser({ onCreated }: { onCreated: () => void }) {
  const [form, setForm] = useState({ username: "", email: "", password: "", roles: "" });
  const [error, setError] = useState<ShownError | undefined>();
  const [done, setDone] = useState("");
  const set = (k: keyof typeof form) => (v: string) => setForm({ ...form, [k]: v });
  return (
    <section aria-labelledby="create-user-title">
      <h2 id="create-user-title">Create a user</h2>
      {done ? (
        <p class="ok" role="status">
          {done}
        </p>
      ) : null}
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setError(undefined);
          try {
            const r = await client(UserAdminService).createUser({
              ...form,
              roles: roleList(form.roles),
            });
            setDone(`Created ${r.user?.username}.`);
            setForm({ username: "", email: "", password: "", roles: "" });
            onCreated();
          } catch (err) {
            setError(shownError(err));
          }
        }}
      >
        {formError(error, ["username", "email", "password", "roles"])}
        <Field
          id="new-username"
          label="Username"
          value={form.username}
          onInput={set("username")}
          error={fieldError(error, "username")}
        />
        <Field
          id="new-email"
          label="Email"
          value={form.email}
          onInput={set("email")}
          error={fieldError(error, "email")}
        />
        <Field
          id="new-password"
          label="Password"
          type="password"
          autocomplete="new-password"
          value={form.password}
          onInput={set("password")}
          error={fieldError(error, "password")}
        />
        <Field
          id="new-roles"
          label="Roles"
          value={form.roles}
          onInput={set("roles")}
          error={fieldError(error, "roles")}
          hint="Comma-separated, e.g. clinician, viewer."
        />
        <button type="submit">Create user</button>
      </form>
    </section>
  );
}
