import { describe, expect, it } from "vitest";
import { auditValue, createValueInterner } from "../../src/audit/values.js";

/** Asks for keys 0..size-1 in turn, `cycles` times; returns how many values were built. */
function askInTurn(max: number, size: number, cycles: number): { first: number; after: number } {
  const interner = createValueInterner(max);
  let builds = 0;
  const ask = (k: number) =>
    interner.intern(`key-${k}`, () => {
      builds++;
      return { k };
    });
  for (let k = 0; k < size; k++) ask(k);
  const first = builds;
  for (let c = 1; c < cycles; c++) for (let k = 0; k < size; k++) ask(k);
  return { first, after: builds - first };
}

describe("the value interner", () => {
  it("builds each value once while the working set fits", () => {
    expect(askInTurn(100, 100, 6)).toEqual({ first: 100, after: 0 });
  });

  it("keeps most of a working set larger than its bound, asked in turn", () => {
    // Cleared whole at the bound, it built every value again on every lookup here (750).
    const { first, after } = askInTurn(100, 150, 6);
    expect(first).toBe(150);
    expect(after).toBeLessThan(400);
  });

  it("gives the value of the key's content, from either generation", () => {
    const interner = createValueInterner(2);
    const a = interner.intern("a", () => ({ x: 1 }));
    interner.intern("b", () => ({ x: 2 }));
    interner.intern("c", () => ({ x: 3 })); // "a" and "b" are the previous generation now
    expect(interner.intern("a", () => ({ x: "not built" }))).toBe(a);
    expect(a).toEqual(auditValue({ x: 1 }));
  });
});
