import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { consoleHeader } from "./api.js";

let sessionEnded: () => void = () => {};

/** Called when the server says the session is over (the browser then shows sign-in). */
export function onSessionEnded(fn: () => void): void {
  sessionEnded = fn;
}

const consoleInterceptor: Interceptor = (next) => async (req) => {
  for (const [k, v] of Object.entries(consoleHeader)) req.header.set(k, v);
  try {
    return await next(req);
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.Unauthenticated && e.metadata.get("x-console-session") === "ended") {
      sessionEnded();
    }
    throw err;
  }
};

/**
 * The services, called with the Connect protocol (JSON) through the console server, which
 * adds the session's token and API key: the page never holds them.
 */
const transport = createConnectTransport({
  baseUrl: "/console/rpc",
  useBinaryFormat: false,
  interceptors: [consoleInterceptor],
  fetch: (input, init) => fetch(input, { ...init, credentials: "same-origin" }),
});

export const client = <S extends DescService>(service: S) => createClient(service, transport);

/** An error as the console shows it: plain words, the server's reason, the field it names. */
export interface ShownError {
  message: string;
  reason: string;
  field: string;
  code: string;
}

const plain: Record<string, string> = {
  INVALID_CREDENTIALS: "Wrong username or password.",
  INVALID_MFA_CODE: "That code is not valid. Enter the current code from your authenticator app.",
  TOO_MANY_ATTEMPTS: "Too many failed attempts. Wait a little, then try again.",
  API_KEY_INVALID: "This API key is not valid (unknown, revoked or expired).",
  ROLE: "Your role does not allow this.",
  AUDIT_UNAVAILABLE:
    "The audit log cannot be written right now, so nothing was changed. Try again shortly.",
  CONSOLE_SESSION: "Your session has ended. Sign in again.",
  CONSOLE_PAGE: "The console does not offer this to you.",
  VERSION_MISMATCH: "Someone else changed the settings meanwhile.",
};

export function shownError(err: unknown): ShownError {
  if (err instanceof ConnectError) {
    const info = err.findDetails(ErrorInfoSchema)[0];
    const reason = info?.reason ?? "";
    let message = plain[reason] ?? sentence(err.rawMessage);
    if (reason === "API_KEY_SCOPE") {
      message = `Your API key lacks the permission needed: ${info?.metadata.missing_scopes ?? ""}.`;
    }
    return { message, reason, field: info?.metadata.field ?? "", code: Code[err.code] ?? "" };
  }
  if (err instanceof Error && "reason" in err) {
    const e = err as Error & { reason: string; field: string; code: string };
    return {
      message: plain[e.reason] ?? sentence(e.message),
      reason: e.reason,
      field: e.field,
      code: e.code,
    };
  }
  return { message: "Something went wrong.", reason: "", field: "", code: "" };
}

function sentence(text: string): string {
  const t = text.trim();
  if (t === "") return "Something went wrong.";
  const s = t[0]?.toUpperCase() + t.slice(1);
  return /[.!?]$/.test(s) ? s : `${s}.`;
}
