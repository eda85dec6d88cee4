import { describe, expect, it } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { unavailable } from "../../src/errors.js";
import type { ForwardRequest, ForwardResult } from "../../src/gateway/forwarder.js";
import {
  type CallInput,
  classificationsOf,
  createGateway,
  type GatewayDeps,
  neverForwarded,
  type PluginPolicy,
} from "../../src/gateway/gateway.js";
import { checkManifest, endpointPathProblem } from "../../src/gateway/manifest.js";
import type { PluginRecord } from "../../src/gateway/plugin-store.js";
import { silentLogger } from "../../src/log.js";
import { databaseUnavailableReason } from "../../src/storage/index.js";

/** The gateway's decisions with every dependency faked: what is refused, and that it fails closed. */

const plugin: PluginRecord = {
  manifest: {
    id: "rag",
    name: "",
    pluginType: "internal",
    endpoints: { rag_query: "/rag/query" },
    host: "127.0.0.1",
    port: 9,
    traits: [],
  },
  enabled: true,
  unlistedHost: false,
  credentialHash: Buffer.alloc(32),
  coreSecretSealed: "sealed",
  credentialsIssuedAt: new Date(),
  createdAt: new Date(),
  updatedAt: new Date(),
};

function harness(
  overrides: {
    operationsFor?: () => Promise<ReadonlySet<string>>;
    policy?: PluginPolicy;
    reply?: ForwardResult;
  } = {},
) {
  const forwarded: ForwardRequest[] = [];
  const events: AuditEventInput[] = [];
  const auditState = { failing: false };
  const deps: GatewayDeps = {
    plugin: async (id) => (id === "rag" ? plugin : null),
    coreAuthorization: () => "Bearer tgc_secret",
    allowlist: { operationsFor: overrides.operationsFor ?? (async () => new Set(["rag_query"])) },
    policy: overrides.policy ?? { decide: () => ({ decision: "allow" }) },
    forwarder: {
      async forward(req) {
        forwarded.push(req);
        return (
          overrides.reply ?? {
            kind: "reply",
            status: 200,
            body: Buffer.from('{"items":[]}'),
            contentType: "",
          }
        );
      },
      close() {},
    },
    audit: {
      async write(event) {
        if (auditState.failing) throw new Error("audit store down");
        events.push(event);
        return { id: String(events.length), seq: String(events.length), hash: "h" };
      },
    },
    log: silentLogger,
    timeouts: { defaultMs: 1000, maxMs: 5000 },
  };
  return { gateway: createGateway(deps), deps, forwarded, events, auditState };
}

const input = (extra: Partial<CallInput> = {}): CallInput => ({
  caller: { kind: "service", id: "sa-1", name: "ai-core" },
  callerPlugin: "ai-core",
  pluginId: "rag",
  operation: "rag_query",
  payload: { q: "x" },
  timeoutMs: undefined,
  requestId: "r1",
  ...extra,
});

const reasonOf = (p: Promise<unknown>) =>
  p.then(
    () => "ok",
    (e: { reason?: string }) => e.reason,
  );

describe("gateway decisions", () => {
  it("forwards an allowed call to the manifest's path with the core's secret and the default deadline", async () => {
    const h = harness();
    expect(await h.gateway.call(input())).toEqual({ items: [] });
    expect(h.forwarded[0]).toMatchObject({
      path: "/rag/query",
      port: 9,
      timeoutMs: 1000,
      headers: { authorization: "Bearer tgc_secret", "x-traitgate-caller": "ai-core" },
    });
    // A caller's deadline is capped at the maximum.
    await h.gateway.call(input({ timeoutMs: 60_000 }));
    expect(h.forwarded[1]?.timeoutMs).toBe(5000);
  });

  it("fails closed when the allowlist cannot be read: 503, never forwarded", async () => {
    const h = harness({
      operationsFor: async () => {
        throw new Error("connection refused");
      },
    });
    expect(await reasonOf(h.gateway.call(input()))).toBe("ALLOWLIST_UNAVAILABLE");
    expect(h.forwarded).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(h.events.map((e) => [e.action, e.outcome, e.details?.status])).toEqual([
      ["operator_call", "error", 503],
    ]);
  });

  it("answers DATABASE_UNAVAILABLE with Retry-After when the allowlist's database does not answer", async () => {
    const h = harness({
      operationsFor: async () => {
        throw unavailable(databaseUnavailableReason, "the database did not answer in time", {
          retryAfterSeconds: 1,
        });
      },
    });
    await expect(h.gateway.call(input())).rejects.toMatchObject({
      kind: "unavailable",
      reason: "DATABASE_UNAVAILABLE",
      retryAfterSeconds: 1,
    });
    expect(h.forwarded).toEqual([]);
  });

  it("answers only once the call's event is written; refuses calls once one is lost, until the audit log works again", async () => {
    const h = harness();
    h.auditState.failing = true;
    // The plugin answered, but its event could not be written: the caller gets no answer.
    expect(await reasonOf(h.gateway.call(input()))).toBe("AUDIT_UNAVAILABLE");
    expect(h.forwarded.length).toBe(1);
    // Later calls are refused before anything is sent.
    expect(await reasonOf(h.gateway.call(input()))).toBe("AUDIT_UNAVAILABLE");
    expect(h.forwarded.length).toBe(1);
    h.auditState.failing = false;
    // The refused call's own event is the probe: once it is written, calls flow again.
    expect(await reasonOf(h.gateway.call(input()))).toBe("AUDIT_UNAVAILABLE");
    expect(h.events.map((e) => e.details?.reason)).toEqual(["AUDIT_UNAVAILABLE"]);
    expect(await h.gateway.call(input())).toEqual({ items: [] });
    expect(h.forwarded.length).toBe(2);
  });

  it("answers DATABASE_UNAVAILABLE when the event's database does not answer, and works at once when it does", async () => {
    const h = harness();
    let down = true;
    const gateway = createGateway({
      ...h.deps,
      audit: {
        async write() {
          if (down) {
            throw unavailable(databaseUnavailableReason, "the database did not answer in time", {
              retryAfterSeconds: 1,
            });
          }
          return { id: "1", seq: "1", hash: "h" };
        },
      },
    });
    await expect(gateway.call(input())).rejects.toMatchObject({
      reason: "DATABASE_UNAVAILABLE",
      retryAfterSeconds: 1,
    });
    down = false;
    expect(await gateway.call(input())).toEqual({ items: [] });
  });

  it("does not answer before the call's event is committed", async () => {
    let commit: () => void = () => undefined;
    const h = harness();
    const written: string[] = [];
    const slow = createGateway({
      ...h.deps,
      audit: {
        write: (event) =>
          new Promise((resolve) => {
            commit = () => {
              written.push(String(event.details?.reason));
              resolve({ id: "1", seq: "1", hash: "h" });
            };
          }),
      },
    });
    let answered = false;
    const call = slow.call(input()).then((reply) => {
      answered = true;
      return reply;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(answered).toBe(false);
    commit();
    expect(await call).toEqual({ items: [] });
    expect(written).toEqual([""]);
  });

  it("denies when the policy throws, and sends the sanitized payload when it sanitizes", async () => {
    const broken = harness({
      policy: {
        decide: () => {
          throw new Error("engine bug");
        },
      },
    });
    expect(await reasonOf(broken.gateway.call(input()))).toBe("POLICY_DENIED");
    expect(broken.forwarded).toEqual([]);
    const sanitizing = harness({
      policy: { decide: () => ({ decision: "sanitize", apply: () => ({ q: "[REDACTED]" }) }) },
    });
    await sanitizing.gateway.call(input());
    expect(JSON.parse(sanitizing.forwarded[0]?.body.toString() ?? "")).toEqual({ q: "[REDACTED]" });
    // The caller's own bytes are not what goes once the policy changed the payload.
    await sanitizing.gateway.call(input({ payloadJson: Buffer.from('{ "q" : "x" }') }));
    expect(sanitizing.forwarded[1]?.body.toString()).toBe('{"q":"[REDACTED]"}');
  });

  it("passes the caller's payload bytes and the plugin's reply bytes on as they are", async () => {
    const h = harness({
      reply: {
        kind: "reply",
        status: 200,
        body: Buffer.from('{ "items" : [ ] }'),
        contentType: "",
      },
    });
    const payloadJson = Buffer.from('{ "q" : "x", "n": 1.0 }');
    const reply = await h.gateway.callForReply(input({ payload: { q: "x", n: 1 }, payloadJson }));
    expect(h.forwarded[0]?.body).toBe(payloadJson);
    expect(reply.json.toString()).toBe('{ "items" : [ ] }');
    expect(reply.value).toEqual({ items: [] });
    // Without the caller's bytes (gRPC, in process), the payload is written as JSON.
    await h.gateway.call(input());
    expect(h.forwarded[1]?.body.toString()).toBe('{"q":"x"}');
  });

  it("refuses a caller that is not who the body says, a user, an unknown operation", async () => {
    const h = harness();
    expect(await reasonOf(h.gateway.call(input({ callerPlugin: "other" })))).toBe(
      "CALLER_MISMATCH",
    );
    expect(
      await reasonOf(h.gateway.call(input({ caller: { kind: "user", id: "u", name: "ai-core" } }))),
    ).toBe("CALLER_NOT_A_PLUGIN");
    expect(await reasonOf(h.gateway.call(input({ operation: "drop" })))).toBe(
      "OPERATION_NOT_FOUND",
    );
    expect(await reasonOf(h.gateway.call(input({ pluginId: "nope" })))).toBe("PLUGIN_NOT_FOUND");
    expect(h.forwarded).toEqual([]);
  });

  it("knows a plugin's operations by its manifest alone, not by names every object answers to", async () => {
    // Valid operation names that an object's prototype has: even allowlisted, they are no
    // operation of the plugin, and nothing is sent.
    const h = harness({ operationsFor: async () => new Set(["constructor", "__proto__"]) });
    for (const operation of ["constructor", "__proto__"]) {
      expect(await reasonOf(h.gateway.call(input({ operation })))).toBe("OPERATION_NOT_FOUND");
    }
    expect(h.forwarded).toEqual([]);
  });

  it("maps plugin failures: a reply that is not a JSON object is a bad reply", async () => {
    const array = harness({
      reply: { kind: "reply", status: 200, body: Buffer.from("[1]"), contentType: "" },
    });
    expect(await reasonOf(array.gateway.call(input()))).toBe("PLUGIN_BAD_REPLY");
    // Bytes that are not UTF-8 (inside a string, where a lenient decoder would replace them),
    // and a byte-order mark, are no JSON reply either: the reply's bytes may go on as they are.
    for (const body of [
      Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
      Buffer.from('\ufeff{"a":1}'),
    ]) {
      const bad = harness({ reply: { kind: "reply", status: 200, body, contentType: "" } });
      expect(await reasonOf(bad.gateway.call(input()))).toBe("PLUGIN_BAD_REPLY");
    }
    const big = harness({ reply: { kind: "too_large" } });
    expect(await reasonOf(big.gateway.call(input()))).toBe("PLUGIN_REPLY_TOO_LARGE");
  });
});

describe("refused before forwarding", () => {
  it("marks the calls whose payload never reached the forwarder, and only those", async () => {
    const errorOf = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (e: unknown) => e,
      );
    const refusals = [
      await errorOf(harness().gateway.call(input({ pluginId: "nope" }))),
      await errorOf(harness({ operationsFor: async () => new Set() }).gateway.call(input())),
      await errorOf(
        harness({ policy: { decide: () => ({ decision: "deny", reason: "no" }) } }).gateway.call(
          input(),
        ),
      ),
      await errorOf(harness().gateway.call(input({ payload: { documents: "x" } }))),
    ];
    for (const err of refusals) {
      expect(err).toBeDefined();
      expect(neverForwarded(err)).toBe(true);
    }
    // Forwarded, then failed: the plugin may have acted on it.
    const failed = harness({
      reply: { kind: "reply", status: 500, body: Buffer.from("{}"), contentType: "" },
    });
    const afterForward = await errorOf(failed.gateway.call(input()));
    expect(failed.forwarded).toHaveLength(1);
    expect(afterForward).toBeDefined();
    expect(neverForwarded(afterForward)).toBe(false);
    // Forwarded and answered, but its event could not be written: not a refusal either.
    const unaudited = harness();
    unaudited.auditState.failing = true;
    const lost = await errorOf(unaudited.gateway.call(input()));
    expect(unaudited.forwarded).toHaveLength(1);
    expect(neverForwarded(lost)).toBe(false);
  });
});

describe("payload classification", () => {
  it("collects the classes declared at the top, in document and in chunks", () => {
    expect(
      classificationsOf({
        classification: "pii",
        document: { classification: "phi" },
        chunks: [{ classification: "pii" }, { classification: "financial" }, "x"],
      }).sort(),
    ).toEqual(["financial", "phi", "pii"]);
    expect(classificationsOf({ q: "x" })).toEqual([]);
  });

  it("collects every document's own classes in a batch, not only the one it declares", () => {
    // rag_index_batch: a plugin that does not compare them must still get nothing the policy
    // would refuse for the class a document really has.
    expect(
      classificationsOf({
        classification: "public",
        documents: [
          { document: { classification: "public" }, chunks: [{ content: "a" }] },
          { document: { classification: "phi" }, chunks: [{ classification: "pii" }] },
        ],
      }).sort(),
    ).toEqual(["phi", "pii", "public"]);
    expect(() =>
      classificationsOf({ documents: [{}, { document: { classification: 1 } }] }),
    ).toThrow(expect.objectContaining({ field: "payload.documents[1].document.classification" }));
  });

  it("refuses documents that are not a list of objects: their classes and fields would be missed", () => {
    for (const [documents, field] of [
      [{ a: { document: { classification: "phi" } } }, "payload.documents"],
      ["phi", "payload.documents"],
      [
        [{ document: { classification: "public" } }, [{ classification: "phi" }]],
        "payload.documents[1]",
      ],
      [[{}, "x"], "payload.documents[1]"],
    ] as const) {
      expect(() => classificationsOf({ classification: "public", documents } as never)).toThrow(
        expect.objectContaining({ reason: "INVALID_DOCUMENTS", field }),
      );
    }
    expect(classificationsOf({ documents: null } as never)).toEqual([]);
  });

  it("refuses a classification that is not a string, naming where it is", () => {
    expect(() => classificationsOf({ classification: ["phi"] })).toThrow(
      expect.objectContaining({
        reason: "INVALID_CLASSIFICATION",
        field: "payload.classification",
      }),
    );
    expect(() => classificationsOf({ chunks: [{}, { classification: 7 }] })).toThrow(
      expect.objectContaining({ field: "payload.chunks[1].classification" }),
    );
  });
});

describe("manifests", () => {
  it.each([
    ["/rag/query", undefined],
    ["/", undefined],
    ["/rag/", undefined],
    ["rag/query", "must be an absolute path starting with /"],
    ["/a/./b", "must not contain . or .. segments"],
    ["/a//b", "must not contain empty segments (//)"],
    ["/a?x=1", expect.stringContaining("no %, ?, #")],
    ["/a b", expect.stringContaining("no %, ?, #")],
    ["/a\\b", expect.stringContaining("no %, ?, #")],
  ])("path %s", (path, problem) => {
    expect(endpointPathProblem(path)).toEqual(problem);
  });

  it("defaults host and port, and checks every declared trait", () => {
    const checked: string[] = [];
    const manifest = checkManifest(
      {
        id: "p",
        name: "",
        pluginType: "internal",
        endpoints: { b: "/b", a: "/a" },
        host: "",
        port: 0,
        traits: ["compliance:hipaa"],
      },
      {
        checkTrait: (t, field) => void checked.push(`${field}=${t}`),
      },
    );
    expect(manifest).toMatchObject({ host: "127.0.0.1", port: 8080 });
    expect(checked).toEqual([
      "manifest.plugin_type=plugin_type:internal",
      "manifest.traits[0]=compliance:hipaa",
    ]);
  });
});
