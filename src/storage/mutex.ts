/** A first-come, first-served lock: `acquire` resolves with a function that releases it once. */
export interface Mutex {
  acquire(): Promise<() => void>;
}

export function createMutex(): Mutex {
  let tail: Promise<void> = Promise.resolve();
  return {
    async acquire() {
      let unlock = () => {};
      const held = new Promise<void>((resolve) => {
        unlock = resolve;
      });
      const previous = tail;
      tail = previous.then(() => held);
      await previous;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        unlock();
      };
    },
  };
}
