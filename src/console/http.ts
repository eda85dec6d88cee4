import { ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { DomainError, type ErrorKind } from "../errors.js";
import type { Logger } from "../log.js";
import type { NodeRequest, NodeResponse } from "../server/app.js";
import { codeName, httpStatusOf } from "../server/http-status.js";

/**
 * The headers of every console answer: a strict Content-Security-Policy (no inline script or
 * style, nothing from another origin, no framing), no MIME sniffing, no Referer.
 */
export const securityHeaders: Readonly<Record<string, string>> = {
  "content-security-policy": [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join("; "),
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "permissions-policy": "camera=(), microphone=(), geolocation=(), payment=()",
};

export function setSecurityHeaders(res: NodeResponse): void {
  for (const [k, v] of Object.entries(securityHeaders)) res.setHeader(k, v);
}

/** The session cookie's name: `__Host-` bound to this origin under TLS. */
export const cookieName = (tls: boolean) => (tls ? "__Host-tg_console" : "tg_console");

export function readCookie(req: NodeRequest, name: string): string | undefined {
  const header = req.headers.cookie;
  if (header === undefined) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Set-Cookie for the session: HttpOnly, SameSite=Strict, Secure under TLS, whole origin. */
export function sessionCookie(name: string, value: string, tls: boolean): string {
  return `${name}=${value}; Path=/; HttpOnly; SameSite=Strict${tls ? "; Secure" : ""}`;
}

export function clearedCookie(name: string, tls: boolean): string {
  return `${name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict${tls ? "; Secure" : ""}`;
}

/** The header the console's own scripts send and a cross-site form cannot. */
export const csrfHeader = "x-traitgate-console";

/**
 * Why a cookie-authenticated request is refused as possibly cross-site, or undefined when it
 * passes: POST only, the console's header present, `Origin` this server's own, and (when the
 * browser says) `Sec-Fetch-Site: same-origin`.
 */
export function csrfRefusal(req: NodeRequest, tls: boolean): string | undefined {
  if (req.method !== "POST") return "CSRF_METHOD";
  if (req.headers[csrfHeader] !== "1") return "CSRF_HEADER_MISSING";
  const host = req.headers.host ?? req.headers[":authority"];
  const origin = req.headers.origin;
  if (typeof host !== "string" || origin !== `${tls ? "https" : "http"}://${host}`) {
    return "CSRF_ORIGIN";
  }
  const site = req.headers["sec-fetch-site"];
  if (site !== undefined && site !== "same-origin") return "CSRF_SITE";
  return undefined;
}

/** Reads a JSON object body of at most maxBytes; undefined when it is not one. */
export async function readJson(
  req: NodeRequest,
  maxBytes: number,
): Promise<Record<string, unknown> | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) return undefined;
    chunks.push(chunk);
  }
  try {
    const value: unknown = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

export function sendJson(
  res: NodeResponse,
  status: number,
  body: unknown,
  headers: Record<string, string | string[]> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...securityHeaders,
    "content-type": "application/json",
    "cache-control": "no-store",
    ...headers,
  });
  res.end(text);
}

const statusOfKind: Record<ErrorKind, number> = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  already_exists: 409,
  aborted: 409,
  failed_precondition: 400,
  resource_exhausted: 429,
  unavailable: 503,
  deadline_exceeded: 504,
  internal: 500,
};

/** An error of the console's own API: `{code, reason, message, field?}` with its HTTP status. */
export function sendError(
  res: NodeResponse,
  err: unknown,
  log: Logger,
  headers: Record<string, string | string[]> = {},
): void {
  if (err instanceof DomainError) {
    sendJson(
      res,
      statusOfKind[err.kind],
      { code: err.kind, reason: err.reason, message: err.message, field: err.field ?? "" },
      headers,
    );
    return;
  }
  if (err instanceof ConnectError) {
    const info = err.findDetails(ErrorInfoSchema)[0];
    sendJson(
      res,
      httpStatusOf(err.code),
      {
        code: codeName(err.code),
        reason: info?.reason ?? "",
        message: err.rawMessage,
        field: info?.metadata.field ?? "",
      },
      headers,
    );
    return;
  }
  log.error({ err }, "console request failed");
  sendJson(res, 500, {
    code: "internal",
    reason: "INTERNAL",
    message: "internal error",
    field: "",
  });
}
