import { decodeSegment, type PathTemplate } from "./path-template.js";

/** HTTP method → route, for each custom verb ("" for none). */
type VerbTable<T extends object> = Map<string, Map<string, T>>;

interface Node<T extends object> {
  literals: Map<string, Node<T>>;
  wildcard: Node<T> | undefined;
  /** Routes whose template ends at this node. */
  leaves: VerbTable<T>;
  /** Routes whose template ends with `**` at this node. */
  deep: VerbTable<T>;
}

export type MatchResult<T> =
  /** `segments` are the raw (still encoded) path segments the route matched, without the verb. */
  | { kind: "found"; route: T; segments: readonly string[] }
  | { kind: "method_not_allowed"; allowed: readonly string[] }
  | { kind: "not_found" };

function newNode<T extends object>(): Node<T> {
  return { literals: new Map(), wildcard: undefined, leaves: new Map(), deep: new Map() };
}

/**
 * Routes by path template, precompiled into a trie. At each segment a literal
 * beats `*`, which beats `**` (the order Vanguard uses); when the best match
 * serves other HTTP methods only, the search goes on and the methods of every
 * matching template are collected for a 405's `Allow` header.
 */
export class RouteTrie<T extends object> {
  private readonly root: Node<T> = newNode();

  /** Adds a route; throws when the same template shape, verb and method are already taken. */
  add(template: PathTemplate, method: string, route: T): void {
    let node = this.root;
    let table: VerbTable<T> | undefined;
    for (const segment of template.segments) {
      if (segment.kind === "literal") {
        let next = node.literals.get(segment.value);
        if (next === undefined) {
          next = newNode();
          node.literals.set(segment.value, next);
        }
        node = next;
      } else if (segment.kind === "wildcard") {
        node.wildcard ??= newNode();
        node = node.wildcard;
      } else {
        table = node.deep;
      }
    }
    table ??= node.leaves;
    let methods = table.get(template.verb);
    if (methods === undefined) {
      methods = new Map();
      table.set(template.verb, methods);
    }
    if (methods.has(method)) {
      throw new Error(`REST route ${method} ${template.source} is bound twice`);
    }
    methods.set(method, route);
  }

  /** Matches a request path (without the query string) and HTTP method. */
  match(path: string, method: string): MatchResult<T> {
    if (!path.startsWith("/")) return { kind: "not_found" };
    const raw = path.slice(1).split("/");
    const allowed = new Set<string>();
    const last = raw.length - 1;
    const lastSegment = raw[last] ?? "";
    const colon = lastSegment.lastIndexOf(":");
    if (colon >= 0) {
      const verb = decodeSegment(lastSegment.slice(colon + 1)) ?? "";
      const withoutVerb = [...raw.slice(0, last), lastSegment.slice(0, colon)];
      const route = this.search(withoutVerb, verb, method, allowed);
      if (route !== undefined) return { kind: "found", route, segments: withoutVerb };
    }
    // No verb, or no route for it: the colon is part of the last segment.
    const route = this.search(raw, "", method, allowed);
    if (route !== undefined) return { kind: "found", route, segments: raw };
    if (allowed.size > 0) return { kind: "method_not_allowed", allowed: [...allowed].sort() };
    return { kind: "not_found" };
  }

  private search(raw: readonly string[], verb: string, method: string, allowed: Set<string>) {
    const decoded = raw.map((s) => decodeSegment(s) ?? s);
    const pick = (table: VerbTable<T>): T | undefined => {
      const methods = table.get(verb);
      if (methods === undefined) return undefined;
      const route = methods.get(method);
      if (route === undefined) for (const m of methods.keys()) allowed.add(m);
      return route;
    };
    const walk = (node: Node<T>, i: number): T | undefined => {
      if (i === decoded.length) {
        const route = pick(node.leaves);
        if (route !== undefined) return route;
      } else {
        const segment = decoded[i] ?? "";
        const literal = node.literals.get(segment);
        const viaLiteral = literal && walk(literal, i + 1);
        if (viaLiteral !== undefined) return viaLiteral;
        const viaWildcard = node.wildcard && segment !== "" && walk(node.wildcard, i + 1);
        if (viaWildcard) return viaWildcard;
      }
      // `**` takes the remaining segments, zero or more.
      return pick(node.deep);
    };
    return walk(this.root, 0);
  }
}
