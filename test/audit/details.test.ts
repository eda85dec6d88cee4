import { describe, expect, it } from "vitest";
import { maxTextChars, prepareDetails, storableText } from "../../src/audit/details.js";
import { toRecord } from "../../src/audit/event.js";

describe("audit text bounds", () => {
  it("keeps at most maxTextChars of a value, saying how much was left out", () => {
    const long = "x".repeat(maxTextChars + 10);
    expect(storableText(long)).toBe(`${"x".repeat(maxTextChars)}…[10 more]`);
    expect(storableText("short")).toBe("short");
  });

  it("bounds every text of an event: target, details values and keys", () => {
    const huge = "p".repeat(1_000_000);
    const record = toRecord(
      {
        actorType: "anonymous",
        action: "operator_call",
        target: `plugin:${huge}`,
        outcome: "denied",
        details: { caller: huge, [huge]: 1 },
      },
      "00000000-0000-4000-8000-000000000000",
      Date.UTC(2026, 0, 1),
    );
    expect(JSON.stringify(record).length).toBeLessThan(4 * maxTextChars);
    expect(Object.keys(prepareDetails({ a: 1 }))).toEqual(["a"]);
  });
});
