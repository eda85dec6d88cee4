/**
 * The value of `http.cors_allowed_origins` (docs/api.md, "CORS"): web origins separated by
 * commas, spaces or new lines, each written exactly as a browser sends it in `Origin`
 * (`scheme://host[:port]`, lower case, no default port, no path, no trailing slash), so that
 * matching a request is one lookup of its `Origin` header in a set. Read when the setting is
 * checked (src/settings/registry.ts) and when it changes (src/server/cors.ts), never per request.
 */

const separators = /[\s,]+/;

/** At most this many origins; a longer list is refused (it is not an allowlist any more). */
export const maxOrigins = 100;

/** The origins of a value, and a sentence for each entry that is not one. */
export function parseOriginList(value: string): { origins: string[]; problems: string[] } {
  const origins: string[] = [];
  const problems: string[] = [];
  for (const entry of value.split(separators)) {
    if (entry === "") continue;
    const problem = originProblem(entry);
    if (problem === undefined) {
      if (!origins.includes(entry)) origins.push(entry);
    } else problems.push(problem);
  }
  if (origins.length > maxOrigins) problems.push(`lists more than ${maxOrigins} origins`);
  return { origins, problems };
}

/** Why `entry` is not an origin as browsers send it, or undefined when it is one. */
function originProblem(entry: string): string | undefined {
  const shown = JSON.stringify(entry.length > 80 ? `${entry.slice(0, 80)}…` : entry);
  if (entry === "*") {
    return `"*" is not accepted: list each origin (e.g. https://app.example.com)`;
  }
  let url: URL;
  try {
    url = new URL(entry);
  } catch {
    return `${shown} is not an origin (scheme://host[:port], e.g. https://app.example.com)`;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    return `${shown} is not an http or https origin`;
  }
  if (url.origin === entry) return undefined;
  if (url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "") {
    return `${shown} is not an origin: no credentials, query or fragment (e.g. ${url.origin})`;
  }
  if (url.pathname !== "/") return `${shown} is not an origin: no path (write ${url.origin})`;
  return `${shown} is not written as browsers send it: write ${url.origin}`;
}
