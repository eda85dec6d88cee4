/** Waits until `check` holds, polling; resolves with the milliseconds it took. */
export async function until(check: () => boolean, timeoutMs: number, everyMs = 5): Promise<number> {
  const started = performance.now();
  while (!check()) {
    if (performance.now() - started > timeoutMs) throw new Error(`not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
  return performance.now() - started;
}
