import { request } from "node:http";

/** A REST answer as a client at one address sees it. */
export interface AddressedReply {
  status: number;
  reason: string | undefined;
  retryAfter: string | undefined;
  body: Record<string, unknown>;
}

/**
 * POSTs JSON to `baseUrl + path` from a chosen loopback address (127.0.0.2, 127.0.0.3, ...),
 * so that the server tells clients apart by address as it does remote ones. Each call opens
 * its own connection: calls sent together are in flight together.
 */
export function postFrom(
  from: string,
  baseUrl: string,
  path: string,
  body: unknown,
): Promise<AddressedReply> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: hostname,
        port,
        localAddress: from,
        method: "POST",
        path,
        agent: false,
        headers: { "content-type": "application/json" },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => {
          const json = JSON.parse(text || "{}") as Record<string, unknown>;
          const details = json.details as { reason?: string }[] | undefined;
          resolve({
            status: res.statusCode ?? 0,
            reason: details?.[0]?.reason,
            retryAfter: res.headers["retry-after"],
            body: json,
          });
        });
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

/** How many replies had each `status:reason` ("401:INVALID_CREDENTIALS": 3, ...). */
export function tally(replies: readonly AddressedReply[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of replies) {
    const key = `${r.status}:${r.reason ?? ""}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}
