import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  CallResponseSchema,
  GatewayService,
  OperatorAllowlistService,
  type PluginManifest as PluginManifestMessage,
  type Plugin as PluginMessage,
  PluginRegistryService,
} from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { invalidArgument, unauthenticated } from "../errors.js";
import { auditedRequestOf, principalKey, staffPrincipal } from "../server/context.js";
import { noStore } from "../server/no-store.js";
import { presetResponse, requestFieldJson } from "../server/preset-encoding.js";
import type { OperatorAllowlist } from "./allowlist.js";
import type { AllowlistEntry } from "./allowlist-store.js";
import type { Gateway } from "./gateway.js";
import type { OperatorCallFeed } from "./operator-calls.js";
import type {
  ManifestInput,
  Plugin,
  PluginRegistry,
  RegistryActor,
  RegistryMeta,
} from "./plugins.js";
import type { PluginReachabilityCheck } from "./reachability.js";
import { structFieldBinary } from "./struct-binary.js";

/** Thin Connect handlers of the operator lane: parse → call the domain → map the result. */

export function createPluginRegistryService(
  registry: PluginRegistry,
  reachability: PluginReachabilityCheck,
): ServiceImpl<typeof PluginRegistryService> {
  return {
    async checkPluginReachability(req, ctx) {
      const checked = await reachability.check(req.pluginId, ctx.signal);
      return {
        plugins: checked.map((r) => ({
          pluginId: r.pluginId,
          state: r.state,
          httpStatus: r.httpStatus,
          detail: r.detail,
          latencyMs: r.latencyMs,
          checkedAt: timestampFromDate(r.checkedAt),
        })),
      };
    },
    async registerPlugin(req, ctx) {
      noStore(ctx);
      const created = await registry.register(
        actor(ctx),
        meta(ctx),
        manifestInput(req.manifest),
        req.allowUnlistedHost,
      );
      return { plugin: toMessage(created.plugin), credentials: created.credentials };
    },
    async listPlugins() {
      return { plugins: (await registry.list()).map(toMessage) };
    },
    async getPlugin(req) {
      return { plugin: toMessage(await registry.get(req.pluginId)) };
    },
    async updatePlugin(req, ctx) {
      noStore(ctx);
      const input = manifestInput(req.manifest);
      if (input.id !== "" && input.id !== req.pluginId) {
        throw invalidArgument(
          "PLUGIN_ID_MISMATCH",
          "manifest.id must be empty or equal plugin_id",
          {
            field: "manifest.id",
          },
        );
      }
      const updated = await registry.update(
        actor(ctx),
        meta(ctx),
        { ...input, id: req.pluginId },
        req.allowUnlistedHost,
      );
      return { plugin: toMessage(updated.plugin), credentials: updated.credentials };
    },
    async enablePlugin(req, ctx) {
      return {
        plugin: toMessage(await registry.setEnabled(actor(ctx), meta(ctx), req.pluginId, true)),
      };
    },
    async disablePlugin(req, ctx) {
      return {
        plugin: toMessage(await registry.setEnabled(actor(ctx), meta(ctx), req.pluginId, false)),
      };
    },
    async deletePlugin(req, ctx) {
      await registry.delete(actor(ctx), meta(ctx), req.pluginId);
      return {};
    },
    async rotatePluginCredentials(req, ctx) {
      noStore(ctx);
      const rotated = await registry.rotateCredentials(actor(ctx), meta(ctx), req.pluginId);
      return { plugin: toMessage(rotated.plugin), credentials: rotated.credentials };
    },
  };
}

export function createOperatorAllowlistService(
  allowlist: OperatorAllowlist,
): ServiceImpl<typeof OperatorAllowlistService> {
  return {
    async putAllowlistEntry(req, ctx) {
      return entryMessage(
        await allowlist.put(actor(ctx), meta(ctx), {
          caller: req.caller,
          target: req.target,
          operations: req.operations,
        }),
      );
    },
    async listAllowlistEntries(req) {
      const entries = await allowlist.list({
        ...(req.caller ? { caller: req.caller } : {}),
        ...(req.target ? { target: req.target } : {}),
      });
      return { entries: entries.map(entryMessage) };
    },
    async deleteAllowlistEntry(req, ctx) {
      await allowlist.delete(actor(ctx), meta(ctx), req.caller, req.target);
      return {};
    },
  };
}

/** Connect aborts a handler's signal with a DeadlineExceeded error when the caller's deadline passes. */
export const isConnectDeadline = (reason: unknown): boolean =>
  reason instanceof ConnectError && reason.code === Code.DeadlineExceeded;

export function createGatewayService(
  gateway: Gateway,
  feed: OperatorCallFeed,
): ServiceImpl<typeof GatewayService> {
  return {
    async call(req, ctx) {
      const principal = ctx.values.get(principalKey);
      if (principal === undefined) throw unauthenticated("MISSING", "this call needs a credential");
      const reply = await gateway.callForReply({
        caller: { kind: principal.kind, id: principal.userId, name: principal.username },
        callerPlugin: req.callerPlugin,
        pluginId: req.pluginId,
        operation: req.operation,
        payload: req.payload ?? {},
        // REST: the payload's bytes as the caller sent them.
        payloadJson: requestFieldJson(req, "payload"),
        timeoutMs: ctx.timeoutMs(),
        ...auditedRequestOf(ctx.values),
        signal: ctx.signal,
      });
      // The plugin's reply goes out as the bytes it sent (REST) or encoded from them once
      // (gRPC), not through Struct messages; Connect and gRPC-Web serialize the message.
      return presetResponse(create(CallResponseSchema, { reply: reply.value }), {
        restField: { name: "reply", json: reply.json },
        binary: () => structFieldBinary(1, reply.value),
      });
    },
    async *watchOperatorCalls(req, ctx) {
      for await (const call of feed.watch(req.afterSeq, ctx.signal)) {
        yield {
          call: {
            seq: call.seq,
            occurredAt: timestampFromDate(call.occurredAt),
            caller: call.caller,
            target: call.target,
            operation: call.operation,
            outcome: call.outcome,
            status: call.status,
            reason: call.reason,
            latencyMs: call.latencyMs,
            payloadBytes: BigInt(call.payloadBytes),
            requestId: call.requestId,
          },
        };
      }
    },
  };
}

function manifestInput(m: PluginManifestMessage | undefined): ManifestInput {
  return {
    id: m?.id ?? "",
    name: m?.name ?? "",
    pluginType: m?.pluginType ?? "",
    endpoints: m?.endpoints ?? {},
    host: m?.host ?? "",
    port: m?.port ?? 0,
    traits: m?.traits ?? [],
  };
}

function toMessage(p: Plugin): Omit<PluginMessage, "$typeName"> {
  return {
    manifest: {
      $typeName: "traitgate.gateway.v1.PluginManifest",
      id: p.manifest.id,
      name: p.manifest.name,
      pluginType: p.manifest.pluginType,
      endpoints: { ...p.manifest.endpoints },
      host: p.manifest.host,
      port: p.manifest.port,
      traits: [...p.manifest.traits],
    },
    enabled: p.enabled,
    unlistedHost: p.unlistedHost,
    createdAt: timestampFromDate(p.createdAt),
    updatedAt: timestampFromDate(p.updatedAt),
    credentialsIssuedAt: timestampFromDate(p.credentialsIssuedAt),
  };
}

const entryMessage = (e: AllowlistEntry) => ({
  caller: e.caller,
  target: e.target,
  operations: e.operations,
  updatedAt: timestampFromDate(e.updatedAt),
});

function actor(ctx: HandlerContext): RegistryActor {
  const principal = staffPrincipal(ctx.values);
  return { kind: principal.kind, id: principal.userId };
}

const meta = (ctx: HandlerContext): RegistryMeta => auditedRequestOf(ctx.values);

export { GatewayService, OperatorAllowlistService, PluginRegistryService };
