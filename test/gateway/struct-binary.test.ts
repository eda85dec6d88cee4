import { create, fromBinary, type JsonObject, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CallResponseSchema } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { structFieldBinary } from "../../src/gateway/struct-binary.js";

/** The gateway's CallResponse written straight from a plugin's JSON reply, as protobuf-es writes it. */

const replies: JsonObject[] = [
  {},
  { items: [] },
  {
    items: Array.from({ length: 5 }, (_, i) => ({
      id: `doc-${i}`,
      chunk_no: i,
      score: 0.9 - i / 10,
      content: "é€😀x".repeat(400),
      tags: ["a", null, true, false, -1.5e300, [], {}],
    })),
  },
  // Keys as JSON.parse makes them: "__proto__" is an own key there.
  JSON.parse('{"":"","__proto__":{"x":1},"2":2,"1":"one","nested":{"a":{"b":{"c":[[[null]]]}}}}'),
  { lone: "\ud800", big: 1e308, tiny: 5e-324, neg: -0 },
];

describe("a Struct reply encoded from JSON", () => {
  it.each(replies.map((r) => [JSON.stringify(r).slice(0, 40), r] as const))(
    "is protobuf-es's encoding of %s",
    (_, text) => {
      // As a plugin's reply reaches the gateway: parsed from JSON text.
      const reply = JSON.parse(JSON.stringify(text)) as JsonObject;
      if ("__proto__" in text && Object.hasOwn(text, "__proto__")) {
        expect(Object.keys(reply)).toContain("__proto__");
      }
      const ours = structFieldBinary(1, reply);
      const theirs = toBinary(CallResponseSchema, create(CallResponseSchema, { reply }));
      expect(Buffer.from(ours)).toEqual(Buffer.from(theirs));
      expect(fromBinary(CallResponseSchema, ours).reply).toEqual(
        fromBinary(CallResponseSchema, theirs).reply,
      );
    },
  );
});
