import { callJson, type JsonReply } from "./http.js";
import type { TestServer } from "./server.js";

/**
 * Steps the operator-lane suites share: a service account's access token (the caller a
 * plugin allowlist names), and the reason of a plugin's `operator_call` audit event.
 */

/** Creates service account `name` (role `service`) through `adminCall`; its access token. */
export async function serviceAccountToken(
  url: string,
  adminCall: (path: string, body: unknown) => Promise<JsonReply>,
  name: string,
): Promise<string> {
  const account = await adminCall("/api/admin/service-accounts", { name, roles: ["service"] });
  const token = await callJson(url, "/auth/token", {
    grant_type: "client_credentials",
    client_id: name,
    client_secret: account.body.client_secret,
  });
  return token.body.access_token as string;
}

/** The reason of the operator_call event of plugin `id`, once written (waits up to 5 s). */
export async function operatorCallReason(server: TestServer, id: string): Promise<unknown> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const { rows } = await server.core.db.query<{ details: { reason: string } }>(
      "SELECT details FROM audit_events WHERE action = 'operator_call' AND target = $1",
      [`plugin:${id}`],
    );
    if (rows[0] !== undefined || Date.now() > deadline) return rows[0]?.details.reason;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
