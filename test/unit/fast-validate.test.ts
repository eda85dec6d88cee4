import { create, type DescField, type DescMessage, type Message, toJson } from "@bufbuild/protobuf";
import { createValidator, type Validator } from "@bufbuild/protovalidate";
import { FieldRulesSchema } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { describe, expect, it } from "vitest";
import { CallRequestSchema } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { LoginRequestSchema } from "../../gen/traitgate/identity/v1/identity_pb.js";
import {
  EvaluateBatchRequestSchema,
  EvaluateRequestSchema,
} from "../../gen/traitgate/policy/v1/policy_pb.js";
import { rulesOf } from "../../src/openapi/constraints.js";
import { createFastValidator } from "../../src/server/fast-validate.js";
import { createPatternMatcher } from "../../src/server/pattern-match.js";
import { serviceSchemaFiles } from "../support/schema-files.js";

/**
 * src/server/fast-validate.ts answers "valid" before protovalidate does. It must never say so
 * of a message protovalidate refuses: checked on messages of every type in the schema,
 * generated around each rule's edges (lengths at, under and over each bound in code points and
 * in UTF-16 units, surrogate pairs and lone surrogates, pattern near misses, list sizes, unset,
 * zero and set values, nested messages).
 */

const files = serviceSchemaFiles;

function allMessages(): DescMessage[] {
  const out: DescMessage[] = [];
  const visit = (m: DescMessage) => {
    out.push(m);
    m.nestedMessages.forEach(visit);
  };
  for (const file of files) file.messages.forEach(visit);
  return out;
}

/** A small deterministic random source. */
function random(seed: number) {
  let state = seed >>> 0 || 1;
  const next = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(list: readonly T[]): T => list[Math.floor(next() * list.length)] as T,
  };
}

type Random = ReturnType<typeof random>;

const uuids = [
  "0190f3a2-7c1e-7b2a-9d4e-000000000001",
  "0190F3A2-7C1E-7B2A-9D4E-00000000000A",
  "0190f3a2-7c1e-7b2a-9d4e-00000000001",
  "0190f3a2-7c1e-7b2a-9d4e-0000000000011",
  "0190f3a27c1e7b2a9d4e000000000001",
  "0190f3a2-7c1e-7b2a-9d4e-00000000000g",
  "{0190f3a2-7c1e-7b2a-9d4e-000000000001}",
];

/** A field's rules as JSON, the parts the generator reads. */
interface RulesJson {
  string?: { maxLen?: string; minLen?: string };
  repeated?: { minItems?: string; maxItems?: string; items?: { string?: RulesJson["string"] } };
}

const rulesJson = (field: DescField): RulesJson => {
  const rules = rulesOf(field);
  return rules === undefined ? {} : (toJson(FieldRulesSchema, rules) as RulesJson);
};

/** Strings around a field's rules: bounds, patterns, UUIDs, and what a string check misses. */
function stringFor(field: DescField, r: Random): string {
  const json = rulesJson(field);
  const s = json.string ?? json.repeated?.items?.string ?? {};
  const max = s.maxLen === undefined ? 40 : Number(s.maxLen);
  const min = s.minLen === undefined ? 0 : Number(s.minLen);
  const lengths = [0, 1, min - 1, min, min + 1, max - 1, max, max + 1, 2 * max, 64, 65].filter(
    (n) => n >= 0 && n <= 5000,
  );
  const n = r.pick(lengths);
  const alphabet = r.pick([
    "abcdefghijklmnopqrstuvwxyz0123456789-_",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
    "abc:_-.",
    "aZ9 \n\t./",
  ]);
  const plain = Array.from({ length: n }, () => r.pick([...alphabet])).join("");
  switch (r.int(9)) {
    case 0:
      return plain;
    case 1:
      // Surrogate pairs: twice as many UTF-16 units as code points.
      return "😀".repeat(Math.max(0, Math.floor(n / 2))) + (n % 2 ? "é" : "");
    case 2:
      return "😀".repeat(n);
    case 3:
      return `${plain.slice(0, Math.max(0, n - 1))}\ud800`;
    case 4:
      return r.pick(uuids);
    case 5:
      return `${plain}\n`;
    case 6:
      return plain.toUpperCase();
    case 7:
      return r.pick(["", "a", "A", "USER_ACTION", "role:admin", "rag-db", "search", "\u212a"]);
    default:
      return plain.replace(/^./, r.pick(["a", "A", "0", "-", "_", "é"]));
  }
}

function scalarFor(field: DescField, r: Random): unknown {
  switch (field.scalar) {
    case 9: // string
      return stringFor(field, r);
    case 8: // bool
      return r.next() < 0.5;
    case 12: // bytes
      return r.next() < 0.5 ? new Uint8Array() : new Uint8Array([1, 2, 3]);
    case 3: // int64
    case 4: // uint64
    case 18: // sint64
    case 16: // sfixed64
    case 6: // fixed64
      return field.scalar === 4 || field.scalar === 6
        ? r.pick([0n, 1n, 2n ** 40n])
        : r.pick([-(2n ** 40n), -1n, 0n, 1n, 2n ** 40n]);
    case 1: // double
    case 2: // float
      return r.pick([0, -1.5, 1.5, 1e9]);
    default:
      return field.scalar === 13 || field.scalar === 7
        ? r.pick([0, 1, 1000])
        : r.pick([-1, 0, 1, 1000]);
  }
}

function listSize(field: DescField, r: Random): number {
  const json = rulesJson(field);
  const max = Number(json.repeated?.maxItems ?? 3);
  const min = Number(json.repeated?.minItems ?? 0);
  const sizes = [0, 1, 2, min - 1, min, max, max + 1].filter((n) => n >= 0);
  // Lists of messages stay small (each is generated whole); the bound is tried on scalars.
  const cap = field.fieldKind === "list" && field.listKind === "message" ? 3 : 1100;
  return Math.min(r.pick(sizes), cap);
}

/** A message of `desc` with fields set, unset, zero or at the edges of their rules. */
function messageFor(desc: DescMessage, r: Random, depth: number): Message {
  const init: Record<string, unknown> = {};
  if (desc.typeName === "google.protobuf.Struct") {
    return create(desc, { fields: {} } as never);
  }
  for (const field of desc.fields) {
    if (r.next() < 0.15) continue;
    if (field.oneof !== undefined) continue;
    switch (field.fieldKind) {
      case "scalar":
        init[field.localName] = scalarFor(field, r);
        break;
      case "enum":
        init[field.localName] = r.pick([0, ...field.enum.values.map((v) => v.number), 999]);
        break;
      case "message":
        if (depth < 3 && r.next() < 0.7) {
          init[field.localName] = messageFor(field.message, r, depth + 1);
        }
        break;
      case "list": {
        const n = listSize(field, r);
        init[field.localName] = Array.from({ length: n }, () =>
          field.listKind === "message"
            ? messageFor(field.message, r, depth + 1)
            : field.listKind === "enum"
              ? r.pick([0, ...field.enum.values.map((v) => v.number), 999])
              : scalarFor(field, r),
        );
        break;
      }
      case "map":
        break;
    }
  }
  for (const oneof of desc.oneofs) {
    const field = r.next() < 0.3 ? undefined : r.pick(oneof.fields);
    if (field === undefined) continue;
    const value =
      field.fieldKind === "message"
        ? depth < 3
          ? messageFor(field.message, r, depth + 1)
          : undefined
        : field.fieldKind === "enum"
          ? r.pick([0, ...field.enum.values.map((v) => v.number)])
          : scalarFor(field, r);
    if (value !== undefined) init[oneof.localName] = { case: field.localName, value };
  }
  return create(desc, init as never);
}

/** The message as JSON for a failure's message (or its type, when it has no JSON form). */
function label(desc: DescMessage, message: Message): string {
  try {
    return JSON.stringify(toJson(desc, message));
  } catch {
    return "(no JSON form)";
  }
}

describe("the fast validator", () => {
  const regexMatch = createPatternMatcher();
  const protovalidate = createValidator({ regexMatch });
  const calls: string[] = [];
  const recording: Validator = {
    validate(schema, message) {
      calls.push(schema.typeName);
      return protovalidate.validate(schema, message);
    },
  };
  const fast = createFastValidator(recording, regexMatch);

  it("never calls valid what protovalidate refuses, on every message type", () => {
    const r = random(20261128);
    let judged = 0;
    let agreed = 0;
    for (const desc of allMessages()) {
      for (let k = 0; k < 150; k++) {
        const message = messageFor(desc, r, 0);
        calls.length = 0;
        const quick = fast.validate(desc, message as never);
        const truth = protovalidate.validate(desc, message as never);
        if (calls.length === 0) {
          judged++;
          // Answered without protovalidate: it must be valid there too.
          expect(truth.kind, `${desc.typeName} ${label(desc, message)}`).toBe("valid");
        } else {
          // Deferred: protovalidate's answer, as it is.
          expect(quick.kind).toBe(truth.kind);
        }
        if (truth.kind === "valid") agreed++;
      }
    }
    // The generator reaches both sides, and the quick path answers often.
    expect(judged).toBeGreaterThan(1000);
    expect(agreed).toBeGreaterThan(judged);
  });

  it("answers the hot requests without protovalidate", () => {
    const samples = [
      [
        EvaluateRequestSchema,
        create(EvaluateRequestSchema, {
          context: "USER_ACTION",
          traits: ["role:admin"],
          userId: "u1",
          resource: { a: 1 },
        }),
      ],
      [
        EvaluateBatchRequestSchema,
        create(EvaluateBatchRequestSchema, {
          requests: Array.from({ length: 50 }, () => ({ context: "SEARCH", traits: ["x:y"] })),
        }),
      ],
      [
        CallRequestSchema,
        create(CallRequestSchema, {
          pluginId: "rag-db",
          operation: "search",
          callerPlugin: "search",
          payload: {},
        }),
      ],
      [LoginRequestSchema, create(LoginRequestSchema, { username: "ann", password: "pw" })],
    ] as const;
    for (const [schema, message] of samples) {
      calls.length = 0;
      expect(fast.validate(schema as DescMessage, message as never).kind, schema.typeName).toBe(
        "valid",
      );
      expect(calls, schema.typeName).toEqual([]);
    }
  });

  it("leaves refusals to protovalidate, with its violations", () => {
    const bad = create(EvaluateBatchRequestSchema, {
      requests: [{ context: "USER_ACTION" }, { context: "lower" }],
    });
    calls.length = 0;
    const result = fast.validate(EvaluateBatchRequestSchema, bad);
    expect(calls).toEqual(["traitgate.policy.v1.EvaluateBatchRequest"]);
    expect(result.kind).toBe("invalid");
    expect(result.violations?.[0]?.toString()).toContain("requests[1].context");
  });
});
