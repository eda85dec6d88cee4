/**
 * Counts the AbortControllers made until `restore()`: the global is replaced by a subclass
 * that counts its instances (they behave as the original's do).
 */
export function countAbortControllers(): { readonly made: number; restore(): void } {
  const original = globalThis.AbortController;
  let made = 0;
  globalThis.AbortController = class extends original {
    constructor() {
      super();
      made++;
    }
  };
  return {
    get made() {
      return made;
    },
    restore() {
      globalThis.AbortController = original;
    },
  };
}
