import { invalidArgument } from "../errors.js";
import { bitsOf, intersects, orInto, setBit, wordsFor } from "./bitset.js";
import { builtinTraits } from "./builtin-traits.js";
import { parseTrait, type TraitCategory, unknownTraitError } from "./trait-syntax.js";

/** One registered trait: data, as an administrator writes it. */
export interface TraitDefinition {
  name: string;
  description?: string;
  /** Traits this one implies directly; the registry closes them transitively. */
  implies?: readonly string[];
  /** Traits that may not be held together with this one (symmetric). */
  conflicts?: readonly string[];
}

/**
 * The loaded registry: every trait interned to an integer id, with its
 * implication closure (itself included) and the traits its closure conflicts
 * with, both as bit-set rows computed once here.
 */
export interface TraitRegistry {
  readonly definitions: readonly TraitDefinition[];
  /** Bit-set width in 32-bit words. */
  readonly words: number;
  readonly names: readonly string[];
  readonly categories: readonly TraitCategory[];
  /** Row `id * words` is the closure of trait `id`. */
  readonly closures: Uint32Array;
  /** Row `id * words`: every trait that some trait of the closure of `id` conflicts with. */
  readonly conflictClosures: Uint32Array;
  idOf(name: string): number | undefined;
  /** The id of a trait, or the precise error (malformed, unknown category, unregistered). */
  resolve(name: unknown, field: string): number;
  /** The implication chain from `from` to `to` (both included), if `from` implies `to`. */
  derivation(from: number, to: number): number[] | undefined;
  /** Traits of one category, by name. */
  inCategory(category: TraitCategory): string[];
}

/** The built-in traits plus administrator-registered ones. */
export function createTraitRegistry(extra: readonly TraitDefinition[] = []): TraitRegistry {
  return loadTraitRegistry([...builtinTraits, ...extra]);
}

/**
 * Loads a registry from its definitions: names checked, references resolved,
 * implication cycles refused with the cycle named, closures computed once.
 */
export function loadTraitRegistry(definitions: readonly TraitDefinition[]): TraitRegistry {
  const ids = new Map<string, number>();
  const categories: TraitCategory[] = [];
  definitions.forEach((def, i) => {
    const { category } = parseTrait(def.name, `traits[${i}].name`);
    if (ids.has(def.name)) {
      throw invalidArgument("TRAIT_DUPLICATE", `traits[${i}]: "${def.name}" is registered twice`, {
        field: `traits[${i}].name`,
        metadata: { trait: def.name },
      });
    }
    ids.set(def.name, i);
    categories.push(category);
  });
  const resolveRef = (name: unknown, field: string): number => {
    const id = typeof name === "string" ? ids.get(name) : undefined;
    if (id === undefined) throw unknownTraitError(name, field);
    return id;
  };
  const implies = definitions.map((def, i) =>
    (def.implies ?? []).map((n, j) => resolveRef(n, `traits[${i}].implies[${j}]`)),
  );
  const n = definitions.length;
  const words = wordsFor(n);
  const names = definitions.map((d) => d.name);
  refuseCycles(implies, names);

  const closures = new Uint32Array(n * words);
  const done = new Uint8Array(n);
  const close = (id: number): void => {
    if (done[id]) return;
    setBit(closures, id * words, id);
    for (const next of implies[id]!) {
      close(next);
      orInto(closures, id * words, closures, next * words, words);
    }
    done[id] = 1;
  };
  for (let id = 0; id < n; id++) close(id);

  const conflicts = new Uint32Array(n * words);
  definitions.forEach((def, i) => {
    (def.conflicts ?? []).forEach((name, j) => {
      const other = resolveRef(name, `traits[${i}].conflicts[${j}]`);
      setBit(conflicts, i * words, other);
      setBit(conflicts, other * words, i);
    });
  });
  const conflictClosures = new Uint32Array(n * words);
  for (let id = 0; id < n; id++) {
    for (const member of bitsOf(closures, id * words, words)) {
      orInto(conflictClosures, id * words, conflicts, member * words, words);
    }
    if (intersects(closures, id * words, conflictClosures, id * words, words)) {
      throw invalidArgument(
        "TRAIT_SELF_CONFLICT",
        `trait "${names[id]}" implies traits that conflict with each other`,
        { field: `traits[${id}]`, metadata: { trait: names[id]! } },
      );
    }
  }

  return {
    definitions,
    words,
    names,
    categories,
    closures,
    conflictClosures,
    idOf: (name) => ids.get(name),
    resolve: resolveRef,
    derivation: (from, to) => shortestPath(implies, from, to),
    inCategory: (category) => names.filter((_, id) => categories[id] === category),
  };
}

function refuseCycles(implies: readonly number[][], names: readonly string[]): void {
  const state = new Uint8Array(implies.length); // 0 new, 1 on the stack, 2 done
  const stack: number[] = [];
  const visit = (id: number): void => {
    state[id] = 1;
    stack.push(id);
    for (const next of implies[id]!) {
      if (state[next] === 1) {
        const cycle = [...stack.slice(stack.indexOf(next)), next].map((t) => names[t]!);
        throw invalidArgument("TRAIT_CYCLE", `implication cycle: ${cycle.join(" -> ")}`, {
          field: "traits",
          metadata: { cycle: cycle.join(" -> ") },
        });
      }
      if (state[next] === 0) visit(next);
    }
    stack.pop();
    state[id] = 2;
  };
  for (let id = 0; id < implies.length; id++) if (state[id] === 0) visit(id);
}

function shortestPath(
  implies: readonly number[][],
  from: number,
  to: number,
): number[] | undefined {
  const parent = new Map<number, number>([[from, -1]]);
  const queue = [from];
  for (let head = 0; head < queue.length; head++) {
    const id = queue[head]!;
    if (id === to) {
      const path = [id];
      for (let p = parent.get(id)!; p !== -1; p = parent.get(p)!) path.push(p);
      return path.reverse();
    }
    for (const next of implies[id]!) {
      if (!parent.has(next)) {
        parent.set(next, id);
        queue.push(next);
      }
    }
  }
  return undefined;
}
