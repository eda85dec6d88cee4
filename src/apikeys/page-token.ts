import { invalidArgument } from "../errors.js";

/**
 * Page tokens of the key listing are opaque to clients: base64url of
 * `{"v":1,"t":<created_at ISO>,"id":<key id>,"f":<status filter>}`, where t and id are the
 * last key of the previous page. A token used with another filter is refused, because the
 * page it points into belongs to another list.
 */
interface PageToken {
  v: 1;
  t: string;
  id: string;
  f: string;
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export const encodePageToken = (after: { createdAt: Date; id: string }, filter: string): string =>
  Buffer.from(
    JSON.stringify({
      v: 1,
      t: after.createdAt.toISOString(),
      id: after.id,
      f: filter,
    } satisfies PageToken),
  ).toString("base64url");

const invalidPageToken = (message: string) =>
  invalidArgument("INVALID_PAGE_TOKEN", message, { field: "page_token" });

export function decodePageToken(token: string, filter: string): { createdAt: Date; id: string } {
  let parsed: Partial<PageToken> | null;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as Partial<PageToken>;
  } catch {
    throw invalidPageToken("page_token is not a token this service issued");
  }
  const createdAt = typeof parsed?.t === "string" ? new Date(parsed.t) : new Date(Number.NaN);
  if (
    parsed?.v !== 1 ||
    Number.isNaN(createdAt.getTime()) ||
    typeof parsed.id !== "string" ||
    !uuidPattern.test(parsed.id) ||
    typeof parsed.f !== "string"
  ) {
    throw invalidPageToken("page_token is not a token this service issued");
  }
  if (parsed.f !== filter) {
    throw invalidPageToken("page_token was issued for another filter; start from the first page");
  }
  return { createdAt, id: parsed.id };
}
