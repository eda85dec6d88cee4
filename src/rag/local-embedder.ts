import type { Embedder } from "./embedder.js";

/**
 * The default embedder: deterministic feature hashing, no model, no download, no network.
 *
 * A text is lower-cased (NFKC) and split into words (runs of letters and digits). Each word,
 * each pair of adjacent words, and each character 3-, 4- and 5-gram of `#word#` is hashed
 * (FNV-1a, then a murmur3 finaliser) to one of `dimension` positions with a sign from another
 * bit of the hash, and adds its weight there; the vector is then L2-normalised. Character
 * n-grams of one word share a weight of 1, so long words do not dominate.
 *
 * Quality, honestly: this measures shared vocabulary, not meaning. Texts using the same words
 * (or inflections of them, through the character n-grams) score high; synonyms,
 * paraphrases and other languages score near 0. Collisions add noise that grows as the
 * dimension shrinks (1536 is plenty for chunk-sized texts). Good for tests, demos and
 * keyword-like search; use an HTTP embedding model for semantic search.
 */
export function createLocalEmbedder(options: { dimension: number }): Embedder {
  const { dimension } = options;
  const wordPattern = /[\p{L}\p{N}]+/gu;

  /** Adds `weight` at the hashed position of the feature whose hash is h. */
  const add = (vector: Float32Array, h: number, weight: number) => {
    const mixed = fmix32(h);
    const index = mixed % dimension;
    vector[index] = (vector[index] ?? 0) + (mixed & 0x8000_0000 ? -weight : weight);
  };

  function embedOne(text: string): Float32Array {
    const vector = new Float32Array(dimension);
    const words = text.normalize("NFKC").toLowerCase().match(wordPattern) ?? [];
    let previous: number | undefined;
    for (const word of words) {
      const h = fnv(word, 0x811c9dc5 ^ 1);
      add(vector, h, 1);
      if (previous !== undefined) add(vector, Math.imul(previous, 0x01000193) ^ h, 0.5);
      previous = h;
      addCharGrams(vector, `#${word}#`);
    }
    normalise(vector);
    return vector;
  }

  function addCharGrams(vector: Float32Array, padded: string) {
    let count = 0;
    for (let n = 3; n <= 5; n++) count += Math.max(0, padded.length - n + 1);
    if (count === 0) return;
    const weight = 1 / count;
    for (let n = 3; n <= 5; n++) {
      for (let start = 0; start + n <= padded.length; start++) {
        add(vector, fnvRange(padded, start, start + n, 0x811c9dc5 ^ n), weight);
      }
    }
  }

  return {
    name: "local-hash",
    dimension,
    async embed(texts) {
      return texts.map(embedOne);
    },
  };
}

/** FNV-1a over the UTF-16 code units of s, from a seed. */
function fnv(s: string, seed: number): number {
  return fnvRange(s, 0, s.length, seed);
}

function fnvRange(s: string, start: number, end: number, seed: number): number {
  let h = seed >>> 0;
  for (let i = start; i < end; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** murmur3's finaliser: spreads every input bit over the output (FNV's low bits are weak). */
function fmix32(h: number): number {
  let x = h >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85eb_ca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2_ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

function normalise(vector: Float32Array): void {
  let sum = 0;
  for (const v of vector) sum += v * v;
  if (sum === 0) return;
  const scale = 1 / Math.sqrt(sum);
  for (let i = 0; i < vector.length; i++) vector[i] = (vector[i] ?? 0) * scale;
}
