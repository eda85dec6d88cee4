import { useEffect, useState } from "preact/hooks";

/** The console's pages live under /console/<slug>; the server answers each with the same HTML. */
export function usePath(): [string, (path: string) => void] {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const onPop = () => setPath(location.pathname);
    addEventListener("popstate", onPop);
    return () => removeEventListener("popstate", onPop);
  }, []);
  const go = (to: string) => {
    if (to !== location.pathname) history.pushState(null, "", to);
    setPath(to);
  };
  return [path, go];
}
