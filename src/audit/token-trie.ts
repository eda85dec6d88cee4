/**
 * A trie over sequences of strings, for finding what was kept for a structured key (a
 * decision's subject, context, traits, …) without encoding the key as one string first.
 *
 * Keying a decision's inputs by their JSON cost about 15 % of a batch's CPU in process: the
 * JSON of 20–30 trait names built per decision, then hashed whole for the lookup. Walking the
 * trie compares the names one by one instead, most of them already hashed by the policy
 * engine's own lookup of the same strings, and builds nothing once a path exists.
 *
 * A key is a walk from `root()`: `child(node, token)` for each string, `mark(node, m)` for
 * the structure between them (where a list ends, whether an optional part is there), so two
 * different keys never share a path. Tokens and marks live in separate slots: no string can
 * pass for a mark. Nodes with one child keep it inline; a Map is made at the second. Each step
 * is a node read (a cache miss, likely, in a large trie): keys are best laid out in few steps,
 * with mark 0 (kept inline) for the most common structure.
 *
 * Bounded: when it holds `maxNodes` nodes or `maxValues` values (kept with `keep`), the next
 * `root()` starts over with an empty trie (what was kept must then be found by other means,
 * e.g. a value interner behind it). The bound is checked as a walk starts, so one walk may
 * pass it by the nodes it makes.
 */
export interface TrieNode<V> {
  value: V | undefined;
}

class Node<V> implements TrieNode<V> {
  value: V | undefined = undefined;
  token: string | undefined = undefined;
  next: Node<V> | undefined = undefined;
  more: Map<string, Node<V>> | undefined = undefined;
  /** After mark 0, the most used one: kept inline. */
  zero: Node<V> | undefined = undefined;
  marks: (Node<V> | undefined)[] | undefined = undefined;
}

export interface TokenTrie<V> {
  /** The start of a walk; a new, empty trie once the bound was reached. */
  root(): TrieNode<V>;
  /** The node after `token`, made if needed. */
  child(node: TrieNode<V>, token: string): TrieNode<V>;
  /** The node after structural mark `mark` (a small non-negative integer), made if needed. */
  mark(node: TrieNode<V>, mark: number): TrieNode<V>;
  /** Keeps `value` at the node (counted against the bound); returns it. */
  keep(node: TrieNode<V>, value: V): V;
  /** Nodes held now (for tests and sizing). */
  size(): number;
}

export function createTokenTrie<V>(maxNodes = 131_072, maxValues = 16_384): TokenTrie<V> {
  let top = new Node<V>();
  let nodes = 1;
  let values = 0;
  const made = (): Node<V> => {
    nodes++;
    return new Node<V>();
  };
  return {
    root() {
      if (nodes >= maxNodes || values >= maxValues) {
        top = new Node<V>();
        nodes = 1;
        values = 0;
      }
      return top;
    },
    child(at, token) {
      const node = at as Node<V>;
      if (node.token === token) return node.next as Node<V>;
      if (node.token === undefined) {
        node.token = token;
        node.next = made();
        return node.next;
      }
      node.more ??= new Map();
      let next = node.more.get(token);
      if (next === undefined) {
        next = made();
        node.more.set(token, next);
      }
      return next;
    },
    mark(at, mark) {
      const node = at as Node<V>;
      if (mark === 0) {
        node.zero ??= made();
        return node.zero;
      }
      node.marks ??= [];
      let next = node.marks[mark];
      if (next === undefined) {
        next = made();
        node.marks[mark] = next;
      }
      return next;
    },
    keep(at, value) {
      const node = at as Node<V>;
      if (node.value === undefined) values++;
      node.value = value;
      return value;
    },
    size: () => nodes,
  };
}
