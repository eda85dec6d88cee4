import { describe, expect, it } from "vitest";
import type { AuditEventInput } from "../../src/audit/index.js";
import { writeOncePerTurn } from "../../src/gateway/audit-turn.js";

describe("operator_call events once per turn", () => {
  it("hands the events of one turn to the writer together, each with its own outcome", async () => {
    const bursts: string[][] = [];
    let current: string[] | undefined;
    const turn = writeOncePerTurn({
      async write(event: AuditEventInput) {
        if (current === undefined) {
          current = [];
          bursts.push(current);
          queueMicrotask(() => {
            current = undefined;
          });
        }
        current.push(event.action);
        if (event.action === "bad") throw new Error("refused");
        return { id: event.action, seq: "1", hash: "h" };
      },
    });
    const a = turn.write({ actorType: "system", action: "a", outcome: "success" });
    const b = turn.write({ actorType: "system", action: "bad", outcome: "success" });
    const c = turn.write({ actorType: "system", action: "c", outcome: "success" });
    // Nothing reaches the writer before the turn ends.
    expect(bursts).toEqual([]);
    expect(await a).toMatchObject({ id: "a" });
    await expect(b).rejects.toThrow("refused");
    expect(await c).toMatchObject({ id: "c" });
    expect(bursts).toEqual([["a", "bad", "c"]]);
    const d = turn.write({ actorType: "system", action: "d", outcome: "success" });
    turn.flush();
    expect(bursts.at(-1)).toEqual(["d"]);
    await d;
  });
});
