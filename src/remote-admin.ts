/**
 * The command line's `--url` mode: `users create`, `service-accounts create` and `apikeys
 * create` done through a running core's admin API (REST) instead of opening its database,
 * which the server holds (with the embedded database, only one process may open it). The
 * credentials come from the environment, never from argv: TRAITGATE_TOKEN, an administrator's
 * access token (POST /auth/login), and TRAITGATE_API_KEY, an API key with the scope the call
 * needs (users:write, service_accounts:write, api_keys:write), as every administrative API
 * does. The server audits each change as that administrator.
 */

export interface RemoteTarget {
  url: string;
  token: string;
  apiKey: string | undefined;
  fetch: typeof fetch;
}

/** A refusal or failure of the server, with the exit code the command ends with. */
export class RemoteError extends Error {
  override readonly name = "RemoteError";
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

/** The target from `--url` and the environment; throws a RemoteError (exit 2) naming what is missing. */
export function remoteTarget(
  url: string,
  env: NodeJS.ProcessEnv,
  options: { needsApiKey?: boolean; fetch?: typeof fetch } = {},
): RemoteTarget {
  if (!/^https?:\/\/[^/]+/.test(url)) {
    throw new RemoteError(`--url must be the core's http(s):// address (got "${url}")`, 2);
  }
  const token = env.TRAITGATE_TOKEN?.trim();
  if (!token) {
    throw new RemoteError(
      "--url needs TRAITGATE_TOKEN: an administrator's access token (POST /auth/login)",
      2,
    );
  }
  const apiKey = env.TRAITGATE_API_KEY?.trim() || undefined;
  if (options.needsApiKey && !apiKey) {
    throw new RemoteError("--url needs TRAITGATE_API_KEY: an API key with the needed scope", 2);
  }
  return { url: url.replace(/\/+$/, ""), token, apiKey, fetch: options.fetch ?? fetch };
}

/** POSTs `body` as JSON to `path`; the answer's JSON, or a RemoteError saying what went wrong. */
export async function postAdmin(
  target: RemoteTarget,
  path: string,
  body: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    authorization: `Bearer ${target.token}`,
  };
  if (target.apiKey) headers["x-api-key"] = target.apiKey;
  let res: Response;
  try {
    res = await target.fetch(`${target.url}${path}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
    });
  } catch (err) {
    throw new RemoteError(`${target.url} cannot be reached (${(err as Error).message})`, 1);
  }
  const answer = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (res.ok) return answer;
  const details = Array.isArray(answer.details) ? (answer.details as { reason?: string }[]) : [];
  const reason = details.find((d) => typeof d.reason === "string")?.reason;
  const message = typeof answer.message === "string" ? answer.message : "";
  throw new RemoteError(
    `the server answered ${res.status}${reason ? ` ${reason}` : ""}${message ? `: ${message}` : ""}`,
    res.status === 400 ? 2 : 1,
  );
}

const strings = (value: unknown): string[] =>
  Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];

/** POST /api/admin/users; the user as the local command prints it. */
export async function createUserRemotely(
  target: RemoteTarget,
  input: { username: string; email: string; password: string; roles: string[] },
): Promise<{ id: string; username: string; roles: string[] }> {
  // REST answers the User itself (response_body: "user").
  const user = await postAdmin(target, "/api/admin/users", input);
  return { id: String(user.user_id), username: String(user.username), roles: strings(user.roles) };
}

/** POST /api/admin/service-accounts; the account and its client secret (shown once). */
export async function createServiceAccountRemotely(
  target: RemoteTarget,
  input: { name: string; description: string; roles: string[] },
): Promise<{ id: string; name: string; roles: string[]; client_secret: string }> {
  const answer = await postAdmin(target, "/api/admin/service-accounts", input);
  const account = (answer.service_account ?? {}) as Record<string, unknown>;
  return {
    id: String(account.service_account_id),
    name: String(account.name),
    roles: strings(account.roles),
    client_secret: String(answer.client_secret),
  };
}

/** POST /api/admin/api-keys (needs TRAITGATE_API_KEY with api_keys:write); the key, once. */
export async function createApiKeyRemotely(
  target: RemoteTarget,
  input: { name: string; scopes: string[]; expiresAt: Date | undefined },
): Promise<{ key: string; id: string; prefix: string }> {
  const answer = await postAdmin(target, "/api/admin/api-keys", {
    name: input.name,
    scopes: input.scopes,
    ...(input.expiresAt ? { expires_at: input.expiresAt.toISOString() } : {}),
  });
  const record = (answer.api_key ?? {}) as Record<string, unknown>;
  return { key: String(answer.key), id: String(record.key_id), prefix: String(record.prefix) };
}
