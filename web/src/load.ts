import { useCallback, useEffect, useState } from "preact/hooks";
import { type ShownError, shownError } from "./rpc.js";

export type Loaded<T> =
  | { kind: "loading" }
  | { kind: "error"; error: ShownError }
  | { kind: "ready"; data: T };

/** Runs `load` now and on `reload()`; its state is loading, error (in plain words) or ready. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): [Loaded<T>, () => void] {
  const [state, setState] = useState<Loaded<T>>({ kind: "loading" });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let live = true;
    setState({ kind: "loading" });
    load().then(
      (data) => live && setState({ kind: "ready", data }),
      (err: unknown) => live && setState({ kind: "error", error: shownError(err) }),
    );
    return () => {
      live = false;
    };
  }, [round, ...deps]);
  return [state, useCallback(() => setRound((r) => r + 1), [])];
}

export function formatTime(seconds: bigint | number | undefined): string {
  if (seconds === undefined) return "";
  return new Date(Number(seconds) * 1000).toISOString().replace("T", " ").slice(0, 19);
}
