import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  PolicyService,
  PolicyVersionSchema,
  TraitSchema,
} from "../../gen/traitgate/policy/v1/policy_pb.js";
import { auditedRequestOf, originOf, requestIdKey, staffPrincipal } from "../server/context.js";
import { presetResponse } from "../server/preset-encoding.js";
import { encodeEvaluateBatchResponse, encodeEvaluateResponse } from "./decision-binary.js";
import { decisionMessage, derivationMessage, evaluateBatchResponse } from "./decision-message.js";
import type { DecisionCaller, PolicyDecisions } from "./decisions.js";
import type { PolicyActor, PolicyAdmin, TraitView, VersionView } from "./policy-admin.js";
import type { CompleteEvaluationRequest } from "./types.js";

/** Thin Connect handlers for the policy service: parse → call the domain → map the result. */
export function createPolicyService(deps: {
  decisions: PolicyDecisions;
  admin: PolicyAdmin;
}): ServiceImpl<typeof PolicyService> {
  const { decisions, admin } = deps;
  return {
    // gRPC sends the answers' binary as decision-binary.ts writes it (what repeats encoded
    // once); every other path encodes the message.
    async evaluate(req, ctx) {
      const answer = await decisions.evaluate(caller(ctx), requestId(ctx), request(req));
      return presetResponse(decisionMessage(answer), {
        binary: () => encodeEvaluateResponse(answer),
      });
    },
    async evaluateBatch(req, ctx) {
      const answers = await decisions.evaluateBatch(
        caller(ctx),
        requestId(ctx),
        req.requests.map(request),
      );
      return presetResponse(evaluateBatchResponse(answers), {
        binary: () => encodeEvaluateBatchResponse(answers),
      });
    },
    async explain(req, ctx) {
      const { decision, explanation } = await decisions.explain(
        caller(ctx),
        requestId(ctx),
        request(req),
      );
      return {
        decision: decisionMessage(decision),
        givenTraits: explanation.givenTraits,
        impliedTraits: explanation.impliedTraits.map(derivationMessage),
        rules: explanation.rules.map((r) => ({
          id: r.id,
          decision: r.decision,
          inContext: r.inContext,
          candidate: r.candidate,
          missing: r.missing,
          ...(r.anyHeld === undefined ? {} : { anyHeld: r.anyHeld }),
          excludedHeld: r.excludedHeld,
          ...(r.condition === undefined ? {} : { condition: r.condition }),
          matched: r.matched,
        })),
      };
    },
    async listUiFeatures(req, ctx) {
      caller(ctx);
      return decisions.uiFeatures(req.traits);
    },
    async sanitize(req, ctx) {
      const answer = await decisions.sanitize(
        caller(ctx),
        requestId(ctx),
        request(req),
        req.document ?? {},
      );
      return {
        decision: decisionMessage(answer.decision),
        ...(answer.document === undefined ? {} : { document: answer.document as JsonObject }),
        removed: answer.removed.map((r) => ({
          path: r.path,
          kind: r.kind,
          action: r.action,
          // Set only where they apply (fields have no pattern or count): no "" or 0 for absent.
          ...(r.classification === undefined ? {} : { classification: r.classification }),
          ...(r.pattern === undefined ? {} : { pattern: r.pattern }),
          ...(r.count === undefined ? {} : { count: r.count }),
        })),
      };
    },

    async listTraits(req) {
      return { traits: admin.listTraits(req.category || undefined).map(traitMessage) };
    },
    async getTrait(req) {
      return { trait: traitMessage(admin.getTrait(req.name)) };
    },
    async putTrait(req, ctx) {
      const { trait, created } = await admin.putTrait(actor(ctx), meta(ctx), {
        name: req.name,
        ...(req.description ? { description: req.description } : {}),
        implies: req.implies,
        conflicts: req.conflicts,
      });
      return { trait: traitMessage(trait), created };
    },
    async deleteTrait(req, ctx) {
      await admin.deleteTrait(actor(ctx), meta(ctx), req.name);
      return {};
    },
    async listPolicyVersions(req) {
      const page = await admin.listVersions(req);
      return {
        versions: page.items.map(versionMessage),
        activeVersion: page.activeVersion,
        nextPageToken: page.nextPageToken,
      };
    },
    async getPolicyVersion(req) {
      const { version, document } = await admin.getVersion(req.version);
      return { version: versionMessage(version), document: document as unknown as JsonObject };
    },
    async putPolicy(req, ctx) {
      const out = await admin.putPolicy(actor(ctx), meta(ctx), {
        document: req.document ?? {},
        description: req.description,
        activate: req.activate,
      });
      return {
        version: versionMessage(out.version),
        created: out.created,
        activated: out.activated,
      };
    },
    async validatePolicy(req) {
      const out = admin.validate(req.document ?? {}, req.requests.map(request));
      return {
        valid: out.issues.length === 0,
        version: out.version,
        issues: out.issues.map((i) => ({
          reason: i.reason,
          message: i.message,
          ...(i.field ? { field: i.field } : {}),
          ...(i.ruleId ? { ruleId: i.ruleId } : {}),
        })),
        changes: out.changes.map((c) => ({
          index: c.index,
          activeDecision: c.active.decision,
          ...(c.active.decidingRule ? { activeDecidingRule: c.active.decidingRule } : {}),
          candidateDecision: c.candidate.decision,
          ...(c.candidate.decidingRule ? { candidateDecidingRule: c.candidate.decidingRule } : {}),
        })),
        compared: out.compared,
      };
    },
    async activatePolicy(req, ctx) {
      const { version, previousVersion } = await admin.activate(actor(ctx), meta(ctx), req.version);
      return { version, ...(previousVersion ? { previousVersion } : {}) };
    },
    async getPolicyHistory(req) {
      const page = await admin.history(req);
      return {
        activations: page.items.map((a) => ({
          version: a.version,
          ...(a.previousVersion ? { previousVersion: a.previousVersion } : {}),
          activatedAt: timestampFromDate(a.activatedAt),
          activatedBy: a.activatedBy,
          activatedByUserId: a.activatedByUserId,
          requestId: a.requestId,
        })),
        nextPageToken: page.nextPageToken,
      };
    },
  };
}

interface RequestFields {
  userId: string;
  context: string;
  traits: string[];
  classifications: string[];
  resource?: JsonObject | undefined;
}

const request = (req: RequestFields): CompleteEvaluationRequest => ({
  traits: req.traits,
  context: req.context,
  classifications: req.classifications.length > 0 ? req.classifications : undefined,
  userId: req.userId || undefined,
  resource: req.resource,
});

const traitMessage = (t: TraitView): MessageInitShape<typeof TraitSchema> => ({
  name: t.name,
  category: t.category,
  description: t.description ?? "",
  implies: [...(t.implies ?? [])],
  conflicts: [...(t.conflicts ?? [])],
  builtin: t.builtin,
  closure: t.closure,
});

const versionMessage = (v: VersionView): MessageInitShape<typeof PolicyVersionSchema> => ({
  version: v.version,
  description: v.description,
  createdAt: timestampFromDate(v.createdAt),
  createdBy: v.createdBy,
  createdByUserId: v.createdByUserId,
  ruleCount: v.ruleCount,
  active: v.active,
});

/** The caller of a decision: a user or a service account (plugin credentials are refused). */
function caller(ctx: HandlerContext): DecisionCaller {
  const p = staffPrincipal(ctx.values);
  return { kind: p.kind, userId: p.userId, roles: p.roles, origin: originOf(ctx.values) };
}

function actor(ctx: HandlerContext): PolicyActor {
  const p = staffPrincipal(ctx.values);
  return { kind: p.kind, userId: p.userId, username: p.username, apiKeyId: p.apiKey?.id };
}

const requestId = (ctx: HandlerContext): string | undefined => ctx.values.get(requestIdKey);
const meta = (ctx: HandlerContext) => auditedRequestOf(ctx.values);
