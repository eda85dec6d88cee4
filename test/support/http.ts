/** A REST call's outcome: status, JSON body, and the stable reason of an error body. */
export interface JsonReply {
  status: number;
  body: Record<string, unknown>;
  reason: string | undefined;
}

/** Sends JSON to `baseUrl + path` (POST unless said otherwise), with a bearer token if given. */
export async function callJson(
  baseUrl: string,
  path: string,
  body: unknown,
  options: {
    token?: string | undefined;
    method?: string;
    headers?: Record<string, string>;
  } = {},
): Promise<JsonReply> {
  const res = await fetch(`${baseUrl}${path}`, {
    method: options.method ?? "POST",
    headers: {
      "content-type": "application/json",
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...options.headers,
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  const details = json.details as { reason?: string }[] | undefined;
  return { status: res.status, body: json, reason: details?.[0]?.reason };
}
