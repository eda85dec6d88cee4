import { expect } from "vitest";

/** A console request from Node as the console's own page sends it (same origin, its header). */
export async function consoleCall(
  baseUrl: string,
  path: string,
  body: unknown,
  cookie = "",
): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      origin: baseUrl,
      "x-traitgate-console": "1",
      "connect-protocol-version": "1",
      ...(cookie ? { cookie } : {}),
    },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    body: (await res.json()) as Record<string, unknown>,
    headers: res.headers,
  };
}

/** Signs in through the console's API (password, then API key); returns the Cookie header. */
export async function consoleSignIn(
  baseUrl: string,
  user: { username: string; password: string; totpCode?: string },
  apiKey?: string,
): Promise<string> {
  const res = await consoleCall(baseUrl, "/console/api/sign-in", {
    username: user.username,
    password: user.password,
    totp_code: user.totpCode ?? "",
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const setCookie = res.headers.get("set-cookie") ?? "";
  const cookie = setCookie.split(";", 1)[0] ?? "";
  if (apiKey !== undefined) {
    const key = await consoleCall(baseUrl, "/console/api/api-key", { api_key: apiKey }, cookie);
    expect(key.status, JSON.stringify(key.body)).toBe(200);
  }
  return cookie;
}

/** The reason of a Connect error answered through /console/rpc/. */
export const rpcReason = (body: Record<string, unknown>) =>
  (body.details as { debug?: { reason?: string } }[] | undefined)?.[0]?.debug?.reason;
