import { describe, expect, it } from "vitest";
import { createTokenTrie, type TokenTrie } from "../../src/audit/token-trie.js";

/** Walks `key` (strings are tokens, numbers marks) from the root. */
function walk(trie: TokenTrie<string>, key: readonly (string | number)[]) {
  let node = trie.root();
  for (const part of key)
    node = typeof part === "number" ? trie.mark(node, part) : trie.child(node, part);
  return node;
}

describe("the token trie", () => {
  it("gives one node per key, and different nodes for different keys", () => {
    const trie = createTokenTrie<string>();
    const keys: (string | number)[][] = [
      [],
      [""],
      ["a"],
      ["a", ""],
      ["a", 0],
      ["a", 1],
      [0, "a"],
      ["0"],
      [0],
      ["a", "b"],
      ["b", "a"],
      ["ab"],
      ["a", "b", "c"],
      ["a", "c"],
      ["a", "d"],
      ["\u0000"],
    ];
    keys.forEach((key, k) => {
      walk(trie, key).value = String(k);
    });
    keys.forEach((key, k) => {
      expect(walk(trie, key).value, JSON.stringify(key)).toBe(String(k));
    });
    // A node with one child keeps it inline; the second and third go to its Map.
    expect(walk(trie, ["a", "b"])).toBe(walk(trie, ["a", "b"]));
    expect(walk(trie, ["a", "x"]).value).toBeUndefined();
  });

  it("starts over once it holds its bound, and counts what it holds", () => {
    const trie = createTokenTrie<string>(10);
    walk(trie, ["k"]).value = "kept";
    walk(trie, ["0", "x"]);
    expect(trie.size()).toBe(4);
    // Walking what exists makes nothing.
    expect(walk(trie, ["0", "x"])).toBe(walk(trie, ["0", "x"]));
    expect(walk(trie, ["k"]).value).toBe("kept");
    expect(trie.size()).toBe(4);
    for (let k = 1; k < 4; k++) walk(trie, [String(k), "x"]);
    expect(trie.size()).toBe(10);
    // At the bound, the next walk starts on an empty trie.
    expect(walk(trie, ["k"]).value).toBeUndefined();
    expect(trie.size()).toBe(2);
  });

  it("starts over once it keeps its bound of values", () => {
    const trie = createTokenTrie<string>(1000, 3);
    for (const k of ["a", "b"]) trie.keep(walk(trie, [k]), k);
    // Keeping again at a node counts once.
    trie.keep(walk(trie, ["a"]), "a2");
    expect(walk(trie, ["a"]).value).toBe("a2");
    trie.keep(walk(trie, ["c"]), "c");
    expect(walk(trie, ["a"]).value).toBeUndefined();
  });
});
