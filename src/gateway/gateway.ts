import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { requestFields } from "../audit/event.js";
import type { AuditEventInput, AuditWriter, RequestOrigin } from "../audit/index.js";
import { DomainError, type ErrorKind, invalidArgument, unavailable } from "../errors.js";
import type { Logger } from "../log.js";
import { databaseUnavailableReason } from "../storage/index.js";
import type { OperatorAllowlist } from "./allowlist.js";
import { coreListenerClass } from "./connect-guard.js";
import type { Forwarder, ForwardResult } from "./forwarder.js";
import type { PluginManifest } from "./manifest.js";
import type { PluginRecord } from "./plugin-store.js";

/**
 * The gateway call: who is calling, may they, may this data go there, then
 * one forward to the path of the plugin's manifest, and one `operator_call`
 * audit event whatever happened. Everything that can be prepared once (the
 * plugin's manifest, the opened core secret, the allowlist entry) comes from
 * caches; a decision that cannot be made (the allowlist or the policy fails)
 * refuses the call (fail closed). No transport types here.
 */

/** Who called the gateway, as authenticated (never as the body says). */
export interface GatewayCaller {
  kind: "user" | "service" | "plugin";
  /** The user's, service account's or plugin's id. */
  id: string;
  /** The name callers are allowlisted by: a plugin id or a service account name. */
  name: string;
}

export interface CallInput {
  caller: GatewayCaller;
  /** The `caller_plugin` of the request body. */
  callerPlugin: string;
  pluginId: string;
  operation: string;
  payload: JsonObject;
  /**
   * The payload's JSON text as the caller sent it (REST), when the transport has it: sent to
   * the plugin as it is, unless the policy sanitizes the payload. Must encode `payload`.
   */
  payloadJson?: Buffer | undefined;
  /** The caller's deadline, if it sent one. */
  timeoutMs: number | undefined;
  requestId: string;
  /** Where the request came from, for the operator_call event. */
  origin?: RequestOrigin | undefined;
  signal?: AbortSignal;
}

export type PolicyVerdict =
  | { decision: "allow" }
  | { decision: "deny"; reason: string }
  | { decision: "sanitize"; apply: (payload: JsonObject) => JsonObject };

/** The plugin-interaction policy (context PLUGIN_INTERACTION). */
export interface PluginPolicy {
  decide(input: {
    /** The target plugin: its manifest (plugin_type and further traits). */
    plugin: PluginManifest;
    operation: string;
    /** The data classes the payload declares. */
    classifications: readonly string[];
  }): PolicyVerdict;
}

export interface GatewayDeps {
  plugin: (id: string) => Promise<PluginRecord | null>;
  /**
   * The Authorization header the core shows `plugin` (`Bearer <its core secret>`, opened and
   * built once per credential rotation).
   */
  coreAuthorization: (plugin: PluginRecord) => string;
  allowlist: Pick<OperatorAllowlist, "operationsFor">;
  policy: PluginPolicy;
  forwarder: Forwarder;
  audit: Pick<AuditWriter, "write">;
  log: Logger;
  timeouts: { defaultMs: number; maxMs: number };
  /**
   * Whether the reason the caller's signal aborted with is its deadline passing (the
   * transport knows its deadline errors): the call then ends as a timeout (504), not as a
   * caller that went away.
   */
  isDeadline?: (reason: unknown) => boolean;
  /** Told of every call once it ended (metrics). */
  onCallEnded?: (call: GatewayCallObservation) => void;
}

/**
 * A gateway call as metrics see it: only names the registry controls (a plugin id or an
 * operation that is not registered is "unknown"), the outcome of its operator_call event
 * and its reason ("ok" for a success), and how long the plugin took, when it was called.
 */
export interface GatewayCallObservation {
  plugin: string;
  operation: string;
  outcome: AuditEventInput["outcome"];
  reason: string;
  upstreamSeconds: number | undefined;
}

/** What a call's operator_call event and its observation say besides the input. */
interface CallFacts {
  status: number;
  bytes: number;
  plugin: string;
  operation: string;
  upstreamSeconds: number | undefined;
  /** Set just before the payload is handed to the forwarder: from then on it may be sent. */
  forwarding?: boolean;
}

/** Errors of calls refused before their payload was handed to the forwarder. */
const refusedBeforeForwarding = new WeakSet<object>();

/**
 * Whether a gateway call failed before its payload could reach the plugin (caller, registry,
 * allowlist, policy or audit refusal): the plugin did nothing. False for every other error,
 * which may have come after the plugin acted on the call.
 */
export const neverForwarded = (err: unknown): boolean =>
  typeof err === "object" && err !== null && refusedBeforeForwarding.has(err);

/** A plugin's successful reply: its JSON object as sent (bytes) and as parsed. */
export interface PluginReply {
  json: Buffer;
  value: JsonObject;
}

export interface Gateway {
  call(input: CallInput): Promise<JsonObject>;
  /** The same call, answered with the reply's bytes too (transports pass them on as they are). */
  callForReply(input: CallInput): Promise<PluginReply>;
}

/** Statuses of refusals the gateway decides itself, for the audit event. */
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

/** A plugin's HTTP error status, as the nearest error kind (whose status is the same for the common ones). */
function kindOfStatus(status: number): ErrorKind {
  switch (status) {
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 409:
      return "aborted";
    case 429:
      return "resource_exhausted";
    case 503:
      return "unavailable";
    case 504:
      return "deadline_exceeded";
    default:
      return status >= 500 ? "internal" : "failed_precondition";
  }
}

/** The database did not answer: that error (503, Retry-After) is the answer, as everywhere. */
const databaseDown = (err: unknown): boolean =>
  err instanceof DomainError && err.reason === databaseUnavailableReason;

const refuse = (kind: ErrorKind, reason: string, message: string, field?: string) =>
  new DomainError(kind, reason, message, field ? { field } : {});

/**
 * The data classes a payload declares: `classification` at the top, in `document`, or in
 * `chunks[]`, and the same in each of `documents[]`. A classification that is not a string is
 * refused (400): read as "none", it would let classified data pass as unclassified; so is a
 * `documents` that is not a list of objects.
 */
export function classificationsOf(payload: JsonObject): string[] {
  const found = new Set<string>();
  const take = (v: JsonValue | undefined, field: string) => {
    if (v === undefined || v === null || v === "") return;
    if (typeof v !== "string") {
      throw invalidArgument("INVALID_CLASSIFICATION", `${field} must be a string`, { field });
    }
    found.add(v);
  };
  const isObject = (v: JsonValue | undefined): v is JsonObject =>
    v !== null && typeof v === "object" && !Array.isArray(v);
  // One document: `{classification?, document: {classification}, chunks: [{classification}]}`.
  const ofDocument = (body: JsonObject, at: string) => {
    take(body.classification, `${at}classification`);
    const doc = body.document;
    if (isObject(doc)) take(doc.classification, `${at}document.classification`);
    const chunks = body.chunks;
    if (Array.isArray(chunks)) {
      chunks.forEach((chunk, i) => {
        if (isObject(chunk)) take(chunk.classification, `${at}chunks[${i}].classification`);
      });
    }
  };
  ofDocument(payload, "payload.");
  // A batch (rag_index_batch): every document's own class counts, not only the one the batch
  // declares, so that a plugin that does not check them still gets nothing the policy refused.
  // `documents` is a list of documents or absent: another shape (an object of documents, a
  // list of lists) would hide its documents' classes here and their fields from sanitizing.
  const documents = payload.documents;
  if (documents === undefined || documents === null) return [...found];
  if (!Array.isArray(documents)) {
    throw invalidArgument("INVALID_DOCUMENTS", "payload.documents must be a list of documents", {
      field: "payload.documents",
    });
  }
  documents.forEach((entry, i) => {
    const field = `payload.documents[${i}]`;
    if (!isObject(entry)) {
      throw invalidArgument("INVALID_DOCUMENTS", `${field} must be a document (an object)`, {
        field,
      });
    }
    ofDocument(entry, `${field}.`);
  });
  return [...found];
}

export function createGateway(deps: GatewayDeps): Gateway {
  const { allowlist, policy, forwarder, audit, log } = deps;

  /**
   * Set when an operator_call event could not be written, cleared by the next event that
   * is: while set, calls are refused (fail closed), and each refusal's own event is the probe.
   */
  let auditDown = false;

  async function decideAndForward(input: CallInput, event: CallFacts) {
    if (auditDown) {
      throw unavailable(
        "AUDIT_UNAVAILABLE",
        "the audit log cannot be written: operator calls are refused until it can",
      );
    }
    const { caller } = input;
    if (caller.kind === "user") {
      throw refuse(
        "permission_denied",
        "CALLER_NOT_A_PLUGIN",
        "gateway calls come from plugins and service accounts, not users",
      );
    }
    if (caller.name !== input.callerPlugin) {
      throw refuse(
        "permission_denied",
        "CALLER_MISMATCH",
        "caller_plugin is not the authenticated caller",
        "caller_plugin",
      );
    }
    const plugin = await deps.plugin(input.pluginId).catch((err: unknown) => {
      throw databaseDown(err)
        ? err
        : unavailable("REGISTRY_UNAVAILABLE", "the plugin registry cannot be read", { cause: err });
    });
    if (plugin === null || !plugin.enabled) {
      throw refuse("not_found", "PLUGIN_NOT_FOUND", "no enabled plugin has this id", "plugin_id");
    }
    event.plugin = plugin.manifest.id;
    // Only the manifest's own operations: "constructor" or "__proto__" are valid operation
    // names that every object answers for.
    const path = Object.hasOwn(plugin.manifest.endpoints, input.operation)
      ? plugin.manifest.endpoints[input.operation]
      : undefined;
    if (path === undefined) {
      throw refuse(
        "not_found",
        "OPERATION_NOT_FOUND",
        "the plugin has no such operation",
        "operation",
      );
    }
    event.operation = input.operation;
    const allowed = await allowlist
      .operationsFor(input.callerPlugin, input.pluginId)
      .catch((err: unknown) => {
        throw databaseDown(err)
          ? err
          : unavailable("ALLOWLIST_UNAVAILABLE", "the operator allowlist cannot be read", {
              cause: err,
            });
      });
    if (!allowed.has(input.operation)) {
      throw refuse(
        "permission_denied",
        "NOT_ALLOWLISTED",
        "no allowlist entry permits this caller, plugin and operation",
      );
    }
    const classifications = classificationsOf(input.payload);
    let verdict: PolicyVerdict;
    try {
      verdict = policy.decide({
        plugin: plugin.manifest,
        operation: input.operation,
        classifications,
      });
    } catch (err) {
      log.warn({ err, plugin_id: input.pluginId }, "plugin policy failed: call denied");
      verdict = { decision: "deny", reason: "the policy could not be evaluated" };
    }
    if (verdict.decision === "deny") {
      throw refuse("permission_denied", "POLICY_DENIED", `policy: ${verdict.reason}`);
    }
    // The caller's bytes go on as they are, unless the policy changes them.
    const body =
      verdict.decision === "sanitize"
        ? Buffer.from(JSON.stringify(verdict.apply(input.payload)))
        : input.payloadJson !== undefined
          ? input.payloadJson
          : Buffer.from(JSON.stringify(input.payload));
    event.bytes = body.length;
    const timeoutMs = Math.min(input.timeoutMs ?? deps.timeouts.defaultMs, deps.timeouts.maxMs);
    const sent = performance.now();
    event.forwarding = true;
    const result = await forwarder.forward({
      host: plugin.manifest.host,
      port: plugin.manifest.port,
      path,
      body,
      timeoutMs,
      headers: {
        authorization: deps.coreAuthorization(plugin),
        "x-request-id": input.requestId,
        "x-traitgate-caller": input.callerPlugin,
        "x-traitgate-operation": input.operation,
      },
      ...(input.signal ? { signal: input.signal } : {}),
    });
    if (result.kind !== "refused") event.upstreamSeconds = (performance.now() - sent) / 1000;
    if (result.kind === "aborted" && deps.isDeadline?.(input.signal?.reason)) {
      return replyOf({ kind: "timeout" }, event);
    }
    return replyOf(result, event);
  }

  async function callForReply(input: CallInput): Promise<PluginReply> {
    const started = performance.now();
    const event: CallFacts = {
      status: 200,
      bytes: 0,
      plugin: "unknown",
      operation: "unknown",
      upstreamSeconds: undefined,
    };
    /** `err`, remembered as a refusal before forwarding when the payload was not handed on. */
    const notForwarded = (err: unknown) => {
      if (!event.forwarding && typeof err === "object" && err !== null) {
        refusedBeforeForwarding.add(err);
      }
      return err;
    };
    let outcome: AuditEventInput["outcome"] = "success";
    let reason = "";
    let reply: PluginReply | undefined;
    let failure: unknown;
    try {
      reply = await decideAndForward(input, event);
    } catch (err) {
      failure = err;
      const kind = err instanceof DomainError ? err.kind : "internal";
      reason =
        err instanceof PluginAddressRefused
          ? err.eventReason
          : err instanceof DomainError
            ? err.reason
            : "INTERNAL";
      // The status the caller gets (a plugin's 418 reaches it as 400).
      event.status = statusOfKind[kind];
      outcome =
        kind === "permission_denied" || kind === "unauthenticated" || kind === "not_found"
          ? "denied"
          : err instanceof PluginError
            ? "failure"
            : "error";
    }
    const latencyMs = +(performance.now() - started).toFixed(3);
    deps.onCallEnded?.({
      plugin: event.plugin,
      operation: event.operation,
      outcome,
      reason: reason === "" ? "ok" : reason,
      upstreamSeconds: event.upstreamSeconds,
    });
    // The answer waits for the event's commit (the writer's group commit: the events of the
    // calls ending together share one transaction). An event that cannot be written fails
    // its call, whatever the plugin answered, and refuses later calls until one is written.
    try {
      await audit.write({
        actorType: input.caller.kind,
        actorId: input.caller.id,
        action: "operator_call",
        target: `plugin:${input.pluginId}`,
        outcome,
        ...requestFields(input),
        details: {
          caller: input.callerPlugin,
          operation: input.operation,
          status: event.status,
          reason,
          latency_ms: latencyMs,
          payload_bytes: event.bytes,
        },
      });
      auditDown = false;
    } catch (err) {
      // The database not answering fails every call at its next read or commit anyway, and
      // the lane works again as soon as it answers; any other failure of the audit log
      // closes the lane until an event is written again.
      const dbDown = databaseDown(err);
      if (!dbDown) auditDown = true;
      log.error(
        { err, request_id: input.requestId },
        dbDown
          ? "operator_call audit event lost: the database did not answer, the call fails"
          : "operator_call audit event lost: the call fails, and operator calls are refused until the audit log works",
      );
      throw notForwarded(
        dbDown
          ? err
          : unavailable("AUDIT_UNAVAILABLE", "the audit log cannot be written", { cause: err }),
      );
    }
    if (reply === undefined) throw notForwarded(failure);
    return reply;
  }

  return {
    callForReply,
    call: async (input) => (await callForReply(input)).value,
  };
}

/**
 * A plugin answered with an error status; its JSON body goes back to the caller, never to a
 * log line (DomainError's `body` is not enumerable): a logged PluginError shows the plugin's
 * status and the size of its reply only.
 */
export class PluginError extends DomainError {
  constructor(
    readonly status: number,
    pluginBody: JsonObject | undefined,
    readonly replyBytes = 0,
  ) {
    super(kindOfStatus(status), "PLUGIN_ERROR", `the plugin answered ${status}`, {
      metadata: { plugin_status: String(status) },
      ...(pluginBody ? { body: pluginBody } : {}),
    });
  }
}

/**
 * The plugin's host is, or resolves to, an address plugins may not be reached at: the caller
 * sees an unreachable plugin, the operator_call event says why (docs/operator-lane.md):
 * PLUGIN_IS_CORE when that address, on the manifest's port, is the core's own listener,
 * PLUGIN_ADDRESS_REFUSED for an address class plugins may not be reached at.
 */
export class PluginAddressRefused extends DomainError {
  readonly eventReason: "PLUGIN_IS_CORE" | "PLUGIN_ADDRESS_REFUSED";
  constructor(addressClass: string) {
    super("unavailable", "PLUGIN_UNAVAILABLE", "the plugin cannot be reached", {
      cause: new Error(`the plugin's address is refused (${addressClass})`),
    });
    this.eventReason =
      addressClass === coreListenerClass ? "PLUGIN_IS_CORE" : "PLUGIN_ADDRESS_REFUSED";
  }
}

function replyOf(result: ForwardResult, event: { status: number }): PluginReply {
  switch (result.kind) {
    case "unreachable":
      throw unavailable("PLUGIN_UNAVAILABLE", "the plugin cannot be reached");
    case "refused":
      throw new PluginAddressRefused(result.addressClass);
    case "timeout":
      throw new DomainError(
        "deadline_exceeded",
        "PLUGIN_TIMEOUT",
        "the plugin did not answer in time",
      );
    case "aborted":
      throw new DomainError("aborted", "CALL_ABORTED", "the caller went away");
    case "too_large":
      throw new DomainError(
        "internal",
        "PLUGIN_REPLY_TOO_LARGE",
        "the plugin's reply is too large",
      );
    case "reply": {
      const parsed = parseObject(result.body);
      if (result.status < 200 || result.status > 299)
        throw new PluginError(result.status, parsed, result.body.length);
      if (parsed === undefined) {
        throw new DomainError(
          "internal",
          "PLUGIN_BAD_REPLY",
          "the plugin's reply is not a JSON object",
        );
      }
      event.status = 200;
      return { json: result.body, value: parsed };
    }
  }
}

/** Fatal: a reply that is not UTF-8 is not JSON (its bytes may reach REST callers as they are). */
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function parseObject(body: Buffer): JsonObject | undefined {
  try {
    const value: unknown = JSON.parse(utf8.decode(body));
    return value !== null && typeof value === "object" && !Array.isArray(value)
      ? (value as JsonObject)
      : undefined;
  } catch {
    return undefined;
  }
}
