import { describe, expect, it } from "vitest";
import { chunkText, htmlToText, textOf } from "../../src/search/chunking.js";

describe("text extraction", () => {
  it("keeps the readable text of HTML, without scripts, styles, tags or comments", () => {
    const html = `<html><head><style>p{color:red}</style><script>alert("x")</script></head>
      <body><h1>Triage</h1><!-- hidden --><p>Fever &amp; cough &#8212; see&nbsp;a doctor.</p>
      <ul><li>one</li><li>two</li></ul></body></html>`;
    const text = htmlToText(html);
    expect(text).toBe("Triage\n\nFever & cough — see a doctor.\n\none\n\ntwo");
    expect(text).not.toMatch(/alert|color|hidden|</);
  });

  it("scans adversarial HTML in one pass: unclosed tags, comments and scripts", () => {
    // Each of these took seconds to minutes with per-position regular expressions; the
    // test's timeout would fail them.
    expect(htmlToText("<".repeat(1_000_000)).length).toBe(1_000_000);
    expect(htmlToText(`intro<!--${"a".repeat(1_000_000)}`)).toBe("intro");
    expect(htmlToText(`intro<script>${"x<".repeat(500_000)}`)).toBe("intro");
    expect(htmlToText("<a".repeat(300_000)).startsWith("<a<a")).toBe(true);
    expect(htmlToText("a < b but c")).toBe("a < b but c");
  });

  it("extracts by extension and normalises line ends otherwise", () => {
    expect(textOf("a/b.HTML", "<p>x</p>")).toBe("x");
    expect(textOf("a/b.md", "# T\r\n\r\nbody\r\n")).toBe("# T\n\nbody");
  });
});

describe("chunking", () => {
  const para = (n: number, len: number) => `P${n} ${"w".repeat(len - 4)}.`;

  it("packs whole paragraphs up to the limit, with an overlap from the previous chunk", () => {
    const text = [para(1, 300), para(2, 300), para(3, 300), para(4, 300)].join("\n\n");
    const chunks = chunkText(text, { maxChars: 800, overlapChars: 100 });
    expect(chunks.length).toBe(2);
    expect(chunks[0]).toBe([para(1, 300), para(2, 300)].join("\n\n"));
    // The second chunk starts with the end of the first.
    expect(chunks[1]?.startsWith("w")).toBe(true);
    expect(chunks[1]).toContain(para(3, 300));
    expect(chunks.every((c) => c.length <= 800)).toBe(true);
  });

  it("cuts a paragraph longer than the limit at sentence ends, and never loses text", () => {
    const sentences = Array.from({ length: 40 }, (_, i) => `Sentence number ${i} is here.`);
    const text = sentences.join(" ");
    const chunks = chunkText(text, { maxChars: 300, overlapChars: 0 });
    expect(chunks.length).toBeGreaterThan(3);
    expect(chunks.every((c) => c.length <= 300 && c.endsWith("."))).toBe(true);
    expect(chunks.join(" ")).toBe(text);
  });

  it("gives no chunks for blank text and refuses nonsense options", () => {
    expect(chunkText("  \n\n  ")).toEqual([]);
    expect(() => chunkText("x", { maxChars: 10, overlapChars: 0 })).toThrow(RangeError);
  });
});
