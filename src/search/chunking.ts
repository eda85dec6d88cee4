/**
 * Turning documents into chunks for retrieval: text out of HTML, then chunks
 * of whole paragraphs up to a size limit, consecutive chunks sharing an
 * overlap so that a passage cut at a boundary is still found whole.
 */

export interface ChunkingOptions {
  /** Largest chunk, in characters (default 1,200). */
  maxChars: number;
  /** Characters of the end of one chunk repeated at the start of the next (default 200). */
  overlapChars: number;
}

export const defaultChunking: ChunkingOptions = { maxChars: 1200, overlapChars: 200 };

const entities: Record<string, string> = {
  amp: "&",
  lt: "<",
  gt: ">",
  quot: '"',
  apos: "'",
  nbsp: " ",
};

const blockTags = new Set([
  "p",
  "div",
  "section",
  "article",
  "li",
  "h1",
  "h2",
  "h3",
  "h4",
  "h5",
  "h6",
  "tr",
  "table",
  "blockquote",
  "pre",
  "br",
]);
const hiddenTags = new Set(["script", "style", "noscript", "template"]);

/**
 * The readable text of an HTML document: no scripts, styles, comments or tags; block
 * ends as paragraph breaks; entities decoded. One pass with `indexOf` jumps, so the time is
 * linear in the length whatever the input (an unclosed `<`, comment or script ends the
 * scan instead of being searched for again from every position).
 */
export function htmlToText(html: string): string {
  const lower = html.toLowerCase();
  const out: string[] = [];
  let i = 0;
  while (i < html.length) {
    const lt = html.indexOf("<", i);
    if (lt < 0) {
      out.push(html.slice(i));
      break;
    }
    out.push(html.slice(i, lt));
    if (html.startsWith("<!--", lt)) {
      const end = html.indexOf("-->", lt + 4);
      if (end < 0) break; // an unclosed comment hides the rest
      out.push(" ");
      i = end + 3;
      continue;
    }
    const gt = html.indexOf(">", lt + 1);
    if (gt < 0) {
      // No tag can close any more: the rest is text.
      out.push(html.slice(lt));
      break;
    }
    const name = /^\/?([a-z][a-z0-9]*)/.exec(lower.slice(lt + 1, Math.min(gt, lt + 16)))?.[1];
    i = gt + 1;
    if (name !== undefined && hiddenTags.has(name) && lower[lt + 1] !== "/") {
      const close = lower.indexOf(`</${name}`, i);
      if (close < 0) break; // an unclosed script hides the rest
      const closeEnd = html.indexOf(">", close);
      i = closeEnd < 0 ? html.length : closeEnd + 1;
      out.push(" ");
      continue;
    }
    const isBlockEnd =
      name !== undefined && blockTags.has(name) && (lower[lt + 1] === "/" || name === "br");
    out.push(isBlockEnd ? "\n\n" : " ");
  }
  return out
    .join("")
    .replace(/&(#x[0-9a-f]{1,6}|#\d{1,7}|[a-z]{1,10});/gi, (whole, entity: string) => {
      if (entity[0] === "#") {
        const code =
          entity[1] === "x" || entity[1] === "X"
            ? Number.parseInt(entity.slice(2), 16)
            : Number(entity.slice(1));
        return Number.isFinite(code) && code > 0 && code <= 0x10ffff
          ? String.fromCodePoint(code)
          : " ";
      }
      return entities[entity.toLowerCase()] ?? whole;
    })
    .replace(/[ \t\f\v\r]+/g, " ")
    .replace(/ ?\n ?/g, "\n")
    .replace(/\n{3,}/g, "\n\n")
    .trim();
}

/** The text of a file by its extension: .html/.htm extracted, anything else as is. */
export function textOf(path: string, content: string): string {
  return /\.html?$/i.test(path) ? htmlToText(content) : content.replace(/\r\n?/g, "\n").trim();
}

/**
 * Paragraph chunks: paragraphs (blank-line separated) are packed into chunks of at most
 * `maxChars`; a paragraph longer than that is cut at sentence or word boundaries. Each chunk
 * after the first starts with the last `overlapChars` (cut at a word start) of the previous.
 */
export function chunkText(text: string, options: ChunkingOptions = defaultChunking): string[] {
  const { maxChars, overlapChars } = options;
  if (maxChars < 50 || overlapChars < 0 || overlapChars >= maxChars / 2) {
    throw new RangeError("chunking needs maxChars ≥ 50 and 0 ≤ overlapChars < maxChars / 2");
  }
  const pieces: string[] = [];
  for (const paragraph of text.split(/\n\s*\n/)) {
    const p = paragraph.trim();
    if (p === "") continue;
    if (p.length <= maxChars - overlapChars) pieces.push(p);
    else pieces.push(...splitLong(p, maxChars - overlapChars));
  }
  const chunks: string[] = [];
  let current = "";
  for (const piece of pieces) {
    if (current !== "" && current.length + 2 + piece.length > maxChars - overlapChars) {
      chunks.push(current);
      current = "";
    }
    current = current === "" ? piece : `${current}\n\n${piece}`;
  }
  if (current !== "") chunks.push(current);
  if (overlapChars === 0) return chunks;
  return chunks.map((chunk, i) => {
    if (i === 0) return chunk;
    const previous = chunks[i - 1] ?? "";
    let tail = previous.slice(-overlapChars);
    const wordStart = tail.search(/\s\S/);
    if (wordStart >= 0 && wordStart < tail.length - 1) tail = tail.slice(wordStart + 1);
    return `${tail}\n\n${chunk}`;
  });
}

/** A long paragraph cut into pieces of at most `limit`, at sentence ends, else at spaces, else hard. */
function splitLong(paragraph: string, limit: number): string[] {
  const out: string[] = [];
  let rest = paragraph;
  while (rest.length > limit) {
    const window = rest.slice(0, limit);
    let cut = Math.max(
      window.lastIndexOf(". "),
      window.lastIndexOf("? "),
      window.lastIndexOf("! "),
    );
    cut = cut > limit / 3 ? cut + 1 : window.lastIndexOf(" ");
    if (cut <= limit / 3) cut = limit;
    out.push(rest.slice(0, cut).trim());
    rest = rest.slice(cut).trim();
  }
  if (rest !== "") out.push(rest);
  return out;
}
