import { requestFields } from "../audit/event.js";
import type { AuditEventInput, AuditWriter, RequestOrigin } from "../audit/index.js";
import { DomainError, invalidArgument } from "../errors.js";
import type { Database, Executor } from "../storage/index.js";
import { builtinTraits } from "./builtin-traits.js";
import { compilePolicy, type PolicyEngine } from "./engine.js";
import { compileForActivation } from "./lifecycle.js";
import type { LivePolicy } from "./live.js";
import { failedPrecondition, notFound, policyInvalid } from "./policy-errors.js";
import {
  type ChangeAuthor,
  policyStore,
  type StoredActivation,
  type StoredVersion,
} from "./policy-store.js";
import { createTraitRegistry, type TraitDefinition } from "./registry.js";
import { parseTrait } from "./trait-syntax.js";
import type { Decision, EvaluationRequest, PolicyDocument } from "./types.js";
import { type PolicyIssue, validatePolicy } from "./validate.js";

/** Who is calling an administrative method (set by the auth interceptor). */
export interface PolicyActor {
  kind: "user" | "service";
  userId: string;
  username: string;
  apiKeyId: string | undefined;
}

export interface PolicyRequestMeta {
  requestId: string | undefined;
  /** Where the request came from (absent outside a request). */
  origin?: RequestOrigin | undefined;
}

export interface TraitView extends TraitDefinition {
  category: string;
  builtin: boolean;
  /** Everything it implies, transitively, itself excluded. */
  closure: string[];
}

export interface VersionView extends StoredVersion {
  active: boolean;
}

export interface Page<T> {
  items: T[];
  nextPageToken: string;
}

export interface DecisionChange {
  index: number;
  active: Decision;
  candidate: Decision;
}

export interface PolicyAdmin {
  listTraits(category?: string): TraitView[];
  getTrait(name: string): TraitView;
  putTrait(
    actor: PolicyActor,
    meta: PolicyRequestMeta,
    def: TraitDefinition,
  ): Promise<{ trait: TraitView; created: boolean }>;
  deleteTrait(actor: PolicyActor, meta: PolicyRequestMeta, name: string): Promise<void>;
  listVersions(page: {
    pageSize: number;
    pageToken: string;
  }): Promise<Page<VersionView> & { activeVersion: string }>;
  getVersion(version: string): Promise<{ version: VersionView; document: PolicyDocument }>;
  putPolicy(
    actor: PolicyActor,
    meta: PolicyRequestMeta,
    input: { document: unknown; description: string; activate: boolean },
  ): Promise<{ version: VersionView; created: boolean; activated: boolean }>;
  validate(
    document: unknown,
    requests: readonly EvaluationRequest[],
  ): { version: string; issues: PolicyIssue[]; changes: DecisionChange[]; compared: number };
  activate(
    actor: PolicyActor,
    meta: PolicyRequestMeta,
    version: string,
  ): Promise<{ version: string; previousVersion: string }>;
  history(page: { pageSize: number; pageToken: string }): Promise<Page<StoredActivation>>;
}

const builtinNames = new Set(builtinTraits.map((t) => t.name));
const defaultPageSize = 50;
const pageTokenPattern = /^[1-9][0-9]{0,15}$/;

/**
 * Administration of the trait registry and the policy versions. Every change is checked
 * against the active state under the locked state row, committed with a notification to
 * every process, installed in this process at once, and audited with before and after;
 * refused changes are audited too. Nothing changes the engine that answers until the
 * candidate has validated and compiled.
 */
export function createPolicyAdmin(deps: {
  db: Database;
  audit: Pick<AuditWriter, "write" | "writeIn">;
  live: LivePolicy;
}): PolicyAdmin {
  const { db, audit, live } = deps;

  const author = (actor: PolicyActor, meta: PolicyRequestMeta): ChangeAuthor => ({
    username: actor.username,
    userId: actor.userId,
    requestId: meta.requestId ?? null,
  });

  const event = (
    actor: PolicyActor,
    meta: PolicyRequestMeta,
    action: string,
    target: string,
    outcome: AuditEventInput["outcome"],
    details: Record<string, unknown>,
  ): AuditEventInput => ({
    actorType: actor.kind,
    actorId: actor.userId,
    action,
    target,
    outcome,
    ...requestFields(meta),
    details: { ...details, ...(actor.apiKeyId ? { api_key_id: actor.apiKeyId } : {}) },
  });

  /** Writes a change's success event inside the change's own transaction. */
  type RecordEvent = (tx: Executor, details: Record<string, unknown>) => Promise<void>;

  /**
   * Runs a change. `fn` gets `record`, which it calls inside the transaction that makes the
   * change, so that the change and its event commit together or not at all (an event that
   * cannot be written rolls the change back: 503 AUDIT_UNAVAILABLE). A refusal (a
   * DomainError) is audited before it is answered.
   */
  async function change<T>(
    actor: PolicyActor,
    meta: PolicyRequestMeta,
    action: string,
    target: string,
    attempted: Record<string, unknown>,
    fn: (record: RecordEvent) => Promise<T>,
  ): Promise<T> {
    let recorded = false;
    const record: RecordEvent = async (tx, details) => {
      await audit.writeIn(tx, event(actor, meta, action, target, "success", details));
      recorded = true;
    };
    let result: T;
    try {
      result = await fn(record);
    } catch (err) {
      if (err instanceof DomainError && err.kind !== "unavailable" && err.kind !== "internal") {
        await audit.write(
          event(actor, meta, action, target, "failure", {
            ...attempted,
            reason: err.reason,
            field: err.field,
            ...(err.metadata.issues ? { issues: err.metadata.issues.split("\n") } : {}),
          }),
        );
      }
      throw err;
    }
    if (!recorded) throw new Error(`${action}: the change was made without its audit event`);
    return result;
  }

  const traitView = (engine: PolicyEngine, name: string): TraitView | undefined => {
    const { registry } = engine;
    const id = registry.idOf(name);
    if (id === undefined) return undefined;
    const def = registry.definitions[id]!;
    const closure: string[] = [];
    const row = id * registry.words;
    registry.names.forEach((other, t) => {
      if (t !== id && ((registry.closures[row + (t >>> 5)]! >>> (t & 31)) & 1) === 1) {
        closure.push(other);
      }
    });
    return {
      name: def.name,
      description: def.description ?? "",
      implies: [...(def.implies ?? [])],
      conflicts: [...(def.conflicts ?? [])],
      category: registry.categories[id]!,
      builtin: builtinNames.has(def.name),
      closure,
    };
  };

  const refuseBuiltin = (name: string) => {
    if (builtinNames.has(name)) {
      throw invalidArgument("TRAIT_BUILTIN", `trait "${name}" is built in and cannot change`, {
        field: "name",
        metadata: { trait: name },
      });
    }
  };

  /**
   * Applies a registry change under the lock: the new registry must load and the active
   * policy must still validate with it; then the generation moves and every process
   * recompiles.
   */
  async function changeRegistry(
    edit: (traits: TraitDefinition[]) => TraitDefinition[],
    write: (tx: Executor) => Promise<void>,
    recordIn: (tx: Executor) => Promise<void>,
    inUse?: (err: DomainError) => DomainError,
  ): Promise<PolicyEngine> {
    const { engine, generation } = await db.transaction(async (tx) => {
      await policyStore.lockState(tx);
      const snapshot = await policyStore.snapshot(tx);
      let compiled: PolicyEngine;
      try {
        const registry = createTraitRegistry(edit(snapshot.traits));
        compiled = compileForActivation(snapshot.document, registry);
      } catch (err) {
        if (err instanceof DomainError && inUse) throw inUse(err);
        throw err;
      }
      await write(tx);
      const next = await policyStore.bump(tx);
      await policyStore.notify(tx, next);
      await recordIn(tx);
      return { engine: compiled, generation: next };
    });
    live.install(engine, generation);
    return engine;
  }

  /**
   * Makes `version` the active one inside `tx` (the state row locked first, as every change
   * does). Returns the engine to install once `tx` has committed (none when the version was
   * already active), its generation, and the version it replaced.
   */
  async function activateIn(
    tx: Executor,
    by: ChangeAuthor,
    version: string,
  ): Promise<{ engine: PolicyEngine | undefined; generation: number; previous: string }> {
    const state = await policyStore.lockState(tx);
    const snapshot = await policyStore.snapshot(tx);
    const document = await policyStore.document(tx, version);
    if (document === undefined) {
      throw notFound("POLICY_VERSION_NOT_FOUND", `no stored policy version ${version}`, {
        version,
      });
    }
    const compiled = compileForActivation(document, createTraitRegistry(snapshot.traits));
    if (state.activeVersion === version) {
      return { engine: undefined, generation: state.generation, previous: version };
    }
    const next = await policyStore.activate(tx, version, state.activeVersion, by);
    await policyStore.notify(tx, next);
    return { engine: compiled, generation: next, previous: state.activeVersion ?? "" };
  }

  const page = (token: string): number | undefined => {
    if (token === "") return undefined;
    if (!pageTokenPattern.test(token)) {
      throw invalidArgument("INVALID_PAGE_TOKEN", "page_token is not a token this service issued", {
        field: "page_token",
      });
    }
    return Number(token);
  };

  const withActive = (v: StoredVersion): VersionView => ({
    ...v,
    active: v.version === live.current().version,
  });

  return {
    listTraits(category) {
      const engine = live.current();
      return engine.registry.names
        .map((name) => traitView(engine, name)!)
        .filter((t) => !category || t.category === category);
    },

    getTrait(name) {
      const view = traitView(live.current(), name);
      if (view === undefined) {
        throw notFound("TRAIT_NOT_FOUND", `trait "${name}" is not registered`, { trait: name });
      }
      return view;
    },

    putTrait(actor, meta, def) {
      const target = `trait:${def.name}`;
      return change(actor, meta, "policy_trait_put", target, { after: def }, async (record) => {
        parseTrait(def.name, "name");
        refuseBuiltin(def.name);
        const before = live.current().registry.definitions.find((d) => d.name === def.name);
        const by = author(actor, meta);
        const engine = await changeRegistry(
          (traits) => [...traits.filter((t) => t.name !== def.name), def],
          (tx) => policyStore.putTrait(tx, def, by),
          (tx) => record(tx, { before: before ?? null, after: def }),
        );
        return { trait: traitView(engine, def.name)!, created: before === undefined };
      });
    },

    deleteTrait(actor, meta, name) {
      return change(actor, meta, "policy_trait_delete", `trait:${name}`, {}, async (record) => {
        refuseBuiltin(name);
        const stored = await policyStore.traits(db);
        const before = stored.find((t) => t.name === name);
        if (before === undefined) {
          throw notFound("TRAIT_NOT_FOUND", `trait "${name}" is not registered`, { trait: name });
        }
        const { updatedAt: _at, updatedBy: _by, ...definition } = before;
        await changeRegistry(
          (traits) => traits.filter((t) => t.name !== name),
          async (tx) => {
            // Checked again under the lock: a concurrent delete got there first.
            if (!(await policyStore.deleteTrait(tx, name))) {
              throw notFound("TRAIT_NOT_FOUND", `trait "${name}" is not registered`, {
                trait: name,
              });
            }
          },
          (tx) => record(tx, { before: definition, after: null }),
          (err) =>
            failedPrecondition(
              "TRAIT_IN_USE",
              `trait "${name}" is named by the active policy or another trait (${err.message})`,
              { trait: name },
            ),
        );
        return undefined;
      });
    },

    async listVersions({ pageSize, pageToken }) {
      const limit = pageSize || defaultPageSize;
      const rows = await policyStore.versions(db, { limit: limit + 1, beforeSeq: page(pageToken) });
      const items = rows.slice(0, limit);
      return {
        items: items.map(withActive),
        activeVersion: live.current().version,
        nextPageToken: rows.length > limit ? String(items.at(-1)!.seq) : "",
      };
    },

    async getVersion(version) {
      const wanted = version === "active" ? live.current().version : version;
      const [stored, document] = await Promise.all([
        policyStore.version(db, wanted),
        policyStore.document(db, wanted),
      ]);
      if (stored === undefined || document === undefined) {
        throw notFound("POLICY_VERSION_NOT_FOUND", `no stored policy version ${version}`, {
          version,
        });
      }
      return { version: withActive(stored), document };
    },

    putPolicy(actor, meta, input) {
      return change(
        actor,
        meta,
        "policy_put",
        "policy",
        { activate: input.activate },
        async (record) => {
          const registry = live.current().registry;
          const issues = validatePolicy(input.document, registry);
          if (issues.length > 0) throw policyInvalid(issues, input.document);
          const document = input.document as PolicyDocument;
          const { version } = compilePolicy(document, registry);
          const by = author(actor, meta);
          // Stored, activated (when asked) and audited in one transaction.
          const { created, activation } = await db.transaction(async (tx) => {
            if (input.activate) await policyStore.lockState(tx);
            const created = await policyStore.putVersion(
              tx,
              version,
              document,
              input.description,
              by,
            );
            const activation = input.activate ? await activateIn(tx, by, version) : undefined;
            await record(tx, {
              version,
              created,
              rule_count: document.rules.length,
              ...(activation ? { before: activation.previous || null, after: version } : {}),
            });
            return { created, activation };
          });
          if (activation?.engine !== undefined) {
            live.install(activation.engine, activation.generation);
          }
          const stored = await policyStore.version(db, version);
          return {
            version: withActive(stored!),
            created,
            activated: activation !== undefined && activation.previous !== version,
          };
        },
      );
    },

    validate(document, requests) {
      const registry = live.current().registry;
      const issues = validatePolicy(document, registry);
      if (issues.length > 0) return { version: "", issues, changes: [], compared: 0 };
      const candidate = compilePolicy(document as PolicyDocument, registry);
      // Shadow mode: the same requests through both; nothing is audited or answered.
      const before = live.current().evaluateBatch(requests);
      const after = candidate.evaluateBatch(requests);
      const changes: DecisionChange[] = [];
      before.forEach((active, index) => {
        const next = after[index]!;
        if (active.decision !== next.decision) {
          changes.push({ index, active, candidate: next });
        }
      });
      return { version: candidate.version, issues, changes, compared: requests.length };
    },

    activate(actor, meta, version) {
      const before = live.current().version;
      return change(
        actor,
        meta,
        "policy_activate",
        `policy:${version}`,
        { before, after: version },
        async (record) => {
          const activation = await db.transaction(async (tx) => {
            const done = await activateIn(tx, author(actor, meta), version);
            await record(tx, { before: done.previous || null, after: version });
            return done;
          });
          if (activation.engine !== undefined) {
            live.install(activation.engine, activation.generation);
          }
          return { version, previousVersion: activation.previous };
        },
      );
    },

    async history({ pageSize, pageToken }) {
      const limit = pageSize || defaultPageSize;
      const rows = await policyStore.activations(db, {
        limit: limit + 1,
        beforeSeq: page(pageToken),
      });
      const items = rows.slice(0, limit);
      return { items, nextPageToken: rows.length > limit ? String(items.at(-1)!.seq) : "" };
    },
  };
}
