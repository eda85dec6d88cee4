/**
 * Path templates of `google.api.http` rules (google/api/http.proto):
 *
 *     Template = "/" Segments [ Verb ] ;
 *     Segments = Segment { "/" Segment } ;
 *     Segment  = "*" | "**" | LITERAL | Variable ;
 *     Variable = "{" FieldPath [ "=" Segments ] "}" ;
 *     FieldPath = IDENT { "." IDENT } ;
 *     Verb     = ":" LITERAL ;
 *
 * Parsed once, when the route table is built.
 */

/** One path segment of a template: a literal, `*` (one segment) or `**` (the rest). */
export type Segment = { kind: "literal"; value: string } | { kind: "wildcard" } | { kind: "deep" };

/** A variable binds the path segments [start, end) (or [start, ...) when `deep`) to a field. */
export interface Variable {
  fieldPath: readonly string[];
  start: number;
  end: number;
  /** The variable ends with `**` and takes every remaining segment. */
  deep: boolean;
  /**
   * The variable spans more than one segment: its value keeps the slashes,
   * and `%2F` stays encoded (http.proto, "reserved expansion").
   */
  multiSegment: boolean;
}

export interface PathTemplate {
  source: string;
  segments: readonly Segment[];
  variables: readonly Variable[];
  /** The custom verb after `:`, or "" for none. */
  verb: string;
}

const identPattern = /^[A-Za-z_][A-Za-z0-9_]*$/;
const literalPattern = /^[^/{}*:=]+$/;

export class PathTemplateError extends Error {
  constructor(template: string, problem: string) {
    super(`invalid path template "${template}": ${problem}`);
    this.name = "PathTemplateError";
  }
}

/** Parses a path template; throws PathTemplateError when it breaks the grammar. */
export function parsePathTemplate(template: string): PathTemplate {
  const fail = (problem: string): never => {
    throw new PathTemplateError(template, problem);
  };
  if (!template.startsWith("/")) fail("must start with /");
  const { path, verb } = splitVerb(template, fail);
  const segments: Segment[] = [];
  const variables: Variable[] = [];
  for (const part of splitOutsideBraces(path.slice(1), fail)) {
    if (part.startsWith("{")) {
      if (!part.endsWith("}")) fail(`unterminated variable in "${part}"`);
      const inner = part.slice(1, -1);
      const eq = inner.indexOf("=");
      const fieldPath = (eq < 0 ? inner : inner.slice(0, eq)).split(".");
      if (!fieldPath.every((p) => identPattern.test(p))) fail(`bad field path in "${part}"`);
      const pattern = eq < 0 ? "*" : inner.slice(eq + 1);
      const start = segments.length;
      for (const s of pattern.split("/")) segments.push(parseSegment(s, fail));
      const deep = segments.at(-1)?.kind === "deep";
      const end = segments.length;
      const joined = fieldPath.join(".");
      if (variables.some((v) => v.fieldPath.join(".") === joined)) fail(`"${joined}" bound twice`);
      variables.push({ fieldPath, start, end, deep, multiSegment: deep || end - start !== 1 });
    } else {
      segments.push(parseSegment(part, fail));
    }
  }
  const deepAt = segments.findIndex((s) => s.kind === "deep");
  if (deepAt >= 0 && deepAt !== segments.length - 1) fail("** must be the last segment");
  return { source: template, segments, variables, verb };
}

function parseSegment(text: string, fail: (problem: string) => never): Segment {
  if (text === "*") return { kind: "wildcard" };
  if (text === "**") return { kind: "deep" };
  if (!literalPattern.test(text)) fail(`bad segment "${text}"`);
  return { kind: "literal", value: text };
}

/** Splits off a trailing `:verb`: a colon after the last slash, outside braces. */
function splitVerb(
  template: string,
  fail: (problem: string) => never,
): { path: string; verb: string } {
  let depth = 0;
  let colon = -1;
  for (let i = 0; i < template.length; i++) {
    const c = template[i];
    if (c === "{") depth++;
    else if (c === "}") depth--;
    else if (depth === 0 && c === "/") colon = -1;
    else if (depth === 0 && c === ":" && colon < 0) colon = i;
  }
  if (depth !== 0) fail("unbalanced braces");
  if (colon < 0) return { path: template, verb: "" };
  const verb = template.slice(colon + 1);
  if (!literalPattern.test(verb)) fail(`bad verb "${verb}"`);
  return { path: template.slice(0, colon), verb };
}

/** Splits on slashes that are not inside a variable's braces. */
function splitOutsideBraces(path: string, fail: (problem: string) => never): string[] {
  const parts: string[] = [];
  let depth = 0;
  let from = 0;
  for (let i = 0; i < path.length; i++) {
    const c = path[i];
    if (c === "{") {
      if (depth > 0) fail("nested variables");
      depth++;
    } else if (c === "}") {
      depth--;
    } else if (c === "/" && depth === 0) {
      parts.push(path.slice(from, i));
      from = i + 1;
    }
  }
  parts.push(path.slice(from));
  return parts;
}

const encodedSlash = /%2f/gi;
/** `%2F` → `%252F`, which decodes back to `%2F`. */
const keepEncoded = (match: string): string => `%25${match.slice(1)}`;

/** Percent-decodes one path segment; undefined when the encoding is broken. */
export function decodeSegment(segment: string): string | undefined {
  if (!segment.includes("%")) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/**
 * The value of a variable over the raw (still encoded) path segments: one
 * segment fully decoded, several joined with "/" and decoded except `%2F`.
 */
export function variableValue(
  variable: Variable,
  rawSegments: readonly string[],
): string | undefined {
  const end = variable.deep ? rawSegments.length : variable.end;
  if (!variable.multiSegment) return decodeSegment(rawSegments[variable.start] ?? "");
  const parts: string[] = [];
  for (let i = variable.start; i < end; i++) {
    const decoded = decodeSegment((rawSegments[i] ?? "").replace(encodedSlash, keepEncoded));
    if (decoded === undefined) return undefined;
    parts.push(decoded);
  }
  return parts.join("/");
}
