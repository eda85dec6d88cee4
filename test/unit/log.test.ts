import { describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";

/**
 * The logger's redaction: request data (passwords, tokens, codes and other fields of
 * bodies, credentials in headers, payloads, plugin replies) never reaches a line, wherever
 * it is put; an outcome (the gRPC code, HTTP status, ErrorInfo reason) always does.
 */

function line(fields: Record<string, unknown>): Record<string, unknown> {
  const lines: string[] = [];
  createLogger({ level: "debug", destination: { write: (l) => lines.push(l) } }).info(
    fields,
    "test",
  );
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0] ?? "{}") as Record<string, unknown>;
}

const secret = "SECRET-VALUE-0451";

describe("log redaction", () => {
  it("keeps the outcome of a call: gRPC code, HTTP status, reason", () => {
    const fields = {
      code: "permission_denied",
      http_status: 403,
      reason: "NOT_ALLOWLISTED",
      rpc: "traitgate.gateway.v1.GatewayService/Call",
      err: { code: "ECONNREFUSED", message: "connect failed" },
    };
    expect(line(fields)).toMatchObject(fields);
  });

  it.each([
    ["a password", { password: secret }],
    ["a new password in a request", { request: { new_password: secret } }],
    ["a TOTP code", { request: { totp_code: secret } }],
    ["recovery codes", { recovery_codes: [secret] }],
    ["a code in a request body", { body: { code: secret } }],
    ["a body one level deep", { req: { body: { anything: secret } } }],
    ["a plugin's error body on an error", { err: { type: "PluginError", body: { e: secret } } }],
    ["a cause's body", { err: { cause: { body: { e: secret } } } }],
    ["an authorization header", { headers: { authorization: `Bearer ${secret}` } }],
    ["an API key header", { req: { headers: { "x-api-key": secret } } }],
    ["a cookie", { headers: { cookie: `sid=${secret}` } }],
    ["a refresh token", { refresh_token: secret }],
    ["a client secret", { client_secret: secret }],
    ["a secret in a logged message", { message: { secret } }],
    ["an otpauth URI", { otpauth_uri: `otpauth://totp/x?secret=${secret}` }],
    ["a payload", { payload: { note: secret } }],
    ["a plugin reply", { reply: { items: [secret] } }],
    ["document content", { content: secret }],
    ["a search query", { q: secret }],
    ["a PostgreSQL error's row values", { err: { detail: `Key (username)=(${secret})` } }],
  ])("never writes %s", (_, fields) => {
    expect(JSON.stringify(line(fields))).not.toContain(secret);
  });
});
