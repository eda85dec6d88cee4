/** The console server's own JSON API (/console/api/): sign-in steps, the session, sign-out. */

export type Stage = "signed_out" | "enrol" | "api_key" | "active";

export interface SessionInfo {
  stage: Stage;
  /** The session was ended by the server (revoked login, idle, deactivated). */
  ended?: boolean;
  user?: { id: string; username: string; roles: string[] };
  mfa?: boolean;
  access?: "console" | "mfa_needed" | "none";
  pages?: string[];
  features?: string[];
  policy_version?: string;
  api_key?: { id: string; scopes: string[] } | null;
  idle_timeout_seconds?: number;
}

/** An error answered by the server: its stable reason and the field it is about. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly reason: string,
    readonly field: string,
  ) {
    super(message);
  }
}

/** The header a cross-site form cannot send; the server refuses console calls without it. */
export const consoleHeader = { "x-traitgate-console": "1" } as const;

export async function post<T>(path: string, body: Record<string, unknown> = {}): Promise<T> {
  let res: Response;
  try {
    res = await fetch(path, {
      method: "POST",
      headers: { "content-type": "application/json", ...consoleHeader },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
  } catch {
    throw new ApiError("The server cannot be reached.", "unavailable", "NETWORK", "");
  }
  const json = (await res.json().catch(() => ({}))) as Record<string, string>;
  if (!res.ok) {
    throw new ApiError(
      json.message ?? `HTTP ${res.status}`,
      json.code ?? "unknown",
      json.reason ?? "",
      json.field ?? "",
    );
  }
  return json as T;
}

export const getSession = () => post<SessionInfo>("/console/api/session");
