import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  SettingDefinition as DefinitionMessage,
  SettingsService,
} from "../../gen/traitgate/settings/v1/settings_pb.js";
import { DomainError, invalidArgument } from "../errors.js";
import { auditedRequestOf, staffPrincipal } from "../server/context.js";
import { maskSecret } from "./mask.js";
import type { SettingDefinition, SettingValue } from "./registry.js";
import type { Settings, SettingsActor, SettingsRequestMeta, SettingsView } from "./settings.js";

/** Thin Connect handlers for settings: parse → call the domain → map the result. */
export function createSettingsService(settings: Settings): ServiceImpl<typeof SettingsService> {
  return {
    async getSettings(_req, ctx) {
      const view = await settings.get();
      ctx.responseHeader.set("etag", etag(view.version));
      return viewMessage(view);
    },
    async updateSettings(req, ctx) {
      const values = req.values ?? {};
      let expected: number | undefined;
      try {
        expected = expectedVersion(ctx.requestHeader.get("if-match"), req.expectedVersion);
      } catch (err) {
        if (err instanceof DomainError) await settings.refuse(actor(ctx), meta(ctx), err, values);
        throw err;
      }
      const outcome = await settings.update(actor(ctx), meta(ctx), {
        values,
        expectedVersion: expected,
      });
      ctx.responseHeader.set("etag", etag(outcome.version));
      return {
        ...viewMessage(outcome),
        changed: outcome.changed,
        restartRequired: outcome.restartRequired,
      };
    },
    async listSettingDefinitions() {
      return { definitions: settings.definitions().map(definitionMessage) };
    },
    async getSettingsHistory(req) {
      const page = await settings.history({
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        key: req.key,
      });
      return {
        updates: page.updates.map((u) => ({
          version: BigInt(u.version),
          updatedAt: timestampFromDate(u.at),
          updatedBy: u.username,
          updatedByUserId: u.userId,
          requestId: u.requestId,
          changes: u.changes.map((c) => ({
            key: c.key,
            before: value(c.before),
            after: value(c.after),
          })),
        })),
        nextPageToken: page.nextPageToken,
      };
    },
  };
}

const value = (v: JsonValue) => fromJson(ValueSchema, v);

const etag = (version: number): string => `"${version}"`;

function viewMessage(view: SettingsView) {
  return {
    settings: view.settings,
    version: BigInt(view.version),
    ...(view.lastUpdate
      ? {
          updatedAt: timestampFromDate(view.lastUpdate.at),
          updatedBy: view.lastUpdate.username,
          updatedByUserId: view.lastUpdate.userId,
        }
      : {}),
    sources: view.sources,
  };
}

function definitionMessage(def: SettingDefinition): Omit<DefinitionMessage, "$typeName"> {
  const defaultValue: SettingValue = def.secret ? maskSecret(String(def.default)) : def.default;
  return {
    key: def.key,
    type: def.type,
    defaultValue: value(defaultValue),
    allowedValues: def.type === "enum" ? [...def.allowed] : [],
    ...(def.type === "integer" ? { min: BigInt(def.min), max: BigInt(def.max) } : {}),
    secret: def.secret,
    restartRequired: def.restartRequired,
    description: def.description,
    environmentVariable: def.env?.variable ?? "",
  };
}

const ifMatchPattern = /^(?:W\/)?"?([0-9]{1,15})"?$/;

/**
 * The version an update is conditional on: the `If-Match` header (`3`, `"3"` or `W/"3"`;
 * `*` is no condition) or the `expected_version` field; both must agree when both are given.
 */
function expectedVersion(header: string | null, field: bigint | undefined): number | undefined {
  let fromHeader: number | undefined;
  const text = header?.trim() ?? "";
  if (text !== "" && text !== "*") {
    const match = ifMatchPattern.exec(text);
    if (match === null) {
      throw invalidArgument("INVALID_FIELD", "If-Match must be a settings version, e.g. 3", {
        field: "If-Match",
      });
    }
    fromHeader = Number(match[1]);
  }
  const fromField = field === undefined ? undefined : Number(field);
  if (fromHeader !== undefined && fromField !== undefined && fromHeader !== fromField) {
    throw invalidArgument("INVALID_FIELD", "If-Match and expected_version disagree", {
      field: "expected_version",
    });
  }
  return fromHeader ?? fromField;
}

/** The authenticated caller and the API key they presented, set by the auth interceptor. */
function actor(ctx: HandlerContext): SettingsActor {
  const principal = staffPrincipal(ctx.values);
  return {
    kind: principal.kind,
    userId: principal.userId,
    username: principal.username,
    apiKeyId: principal.apiKey?.id,
  };
}

const meta = (ctx: HandlerContext): SettingsRequestMeta => auditedRequestOf(ctx.values);
