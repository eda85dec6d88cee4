/**
 * Fixed-width bit sets over interned trait ids, stored as rows of `words`
 * 32-bit words inside one Uint32Array (row `i` starts at `i * words`).
 */
export const wordsFor = (bits: number): number => Math.max(1, Math.ceil(bits / 32));

export function setBit(set: Uint32Array, offset: number, bit: number): void {
  const i = offset + (bit >>> 5);
  set[i] = (set[i] ?? 0) | (1 << (bit & 31));
}

export function hasBit(set: Uint32Array, offset: number, bit: number): boolean {
  return (((set[offset + (bit >>> 5)] ?? 0) >>> (bit & 31)) & 1) === 1;
}

/** `target[tOff..] |= source[sOff..]` over `words` words. */
export function orInto(
  target: Uint32Array,
  tOff: number,
  source: Uint32Array,
  sOff: number,
  words: number,
): void {
  for (let w = 0; w < words; w++) target[tOff + w]! |= source[sOff + w]!;
}

export function intersects(
  a: Uint32Array,
  aOff: number,
  b: Uint32Array,
  bOff: number,
  words: number,
): boolean {
  for (let w = 0; w < words; w++) if ((a[aOff + w]! & b[bOff + w]!) !== 0) return true;
  return false;
}

/** The ids of the bits set in one row, ascending. */
export function bitsOf(set: Uint32Array, offset: number, words: number): number[] {
  const out: number[] = [];
  for (let w = 0; w < words; w++) {
    let bits = set[offset + w]!;
    while (bits !== 0) {
      const low = bits & -bits;
      out.push(w * 32 + 31 - Math.clz32(low));
      bits ^= low;
    }
  }
  return out;
}
