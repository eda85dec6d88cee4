import { describe, expect, it } from "vitest";
import {
  parsedMemberCount,
  topLevelValueSpans,
  writtenMemberCount,
} from "../../src/server/transcoder/json-span.js";

const spans = (text: string, ...keys: string[]) => {
  const bytes = Buffer.from(text);
  // Only for text the transcoder parsed (its decoder drops a byte-order mark first).
  JSON.parse(text.replace(/^\ufeff/, ""));
  return Object.fromEntries(
    [...topLevelValueSpans(bytes, new Set(keys))].map(([k, [a, b]]) => [
      k,
      bytes.subarray(a, b).toString(),
    ]),
  );
};

describe("top-level value spans of a JSON object", () => {
  it("finds each member's value as written, whatever it holds", () => {
    const text =
      ' { "a" : 1 , "payload":{"q":"x \\" } ] {","n":[1,{"}":"]"}]} ,"b":"\\\\","c" : true, "d":null,"e":-1.5e3}  ';
    expect(spans(text, "payload", "a", "b", "c", "d", "e")).toEqual({
      a: "1",
      payload: '{"q":"x \\" } ] {","n":[1,{"}":"]"}]}',
      b: '"\\\\"',
      c: "true",
      d: "null",
      e: "-1.5e3",
    });
  });

  it("reads escaped and non-ASCII keys, and keeps the last of a repeated key (as JSON.parse)", () => {
    expect(spans('{"pay\\u006coad":{"x":1},"é":[],"payload":{"y":2}}', "payload", "é")).toEqual({
      payload: '{"y":2}',
      é: "[]",
    });
  });

  it("finds nothing in what is not an object", () => {
    expect(spans("[1]", "payload")).toEqual({});
    expect(spans("{}", "payload")).toEqual({});
    expect(spans('"payload"', "payload")).toEqual({});
    expect(spans('\ufeff{"payload":{}}', "payload")).toEqual({});
  });
});

describe("member counts, written and parsed", () => {
  const counts = (text: string) => {
    const bytes = Buffer.from(text);
    return [writtenMemberCount(bytes, 0, bytes.length), parsedMemberCount(JSON.parse(text))];
  };

  it("agree when no object repeats a key", () => {
    expect(counts('{"a":{"b":[{"c":"d:e","f":null}]},"g":"\\":"}')).toEqual([5, 5]);
    expect(counts("[]")).toEqual([0, 0]);
  });

  it("differ when one does, at any depth", () => {
    expect(counts('{"classification":"phi","classification":"public"}')).toEqual([2, 1]);
    expect(counts('{"chunks":[{"classification" : "phi", "classification":"x"}]}')).toEqual([3, 2]);
  });
});
