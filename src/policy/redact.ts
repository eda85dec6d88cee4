/**
 * Pattern redaction in free text. Patterns are compiled once here; a match is
 * replaced by `[REDACTED:<NAME>]`, which no other pattern matches again.
 * Applied in this order: email, mrn, card, ssn, phone (an e-mail address or
 * card number must not be half-eaten by the phone pattern).
 */
export const patternNames = ["email", "mrn", "card", "ssn", "phone"] as const;
export type PatternName = (typeof patternNames)[number];

interface Pattern {
  name: PatternName;
  regex: RegExp;
  /** The replacement for one match, or undefined to keep it (a check failed). */
  replace: (match: string, groups: string[]) => string | undefined;
}

const token = (name: PatternName) => `[REDACTED:${name.toUpperCase()}]`;

/** The Luhn checksum of a digit string (payment card numbers). */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

const patterns: readonly Pattern[] = [
  {
    name: "email",
    // Linear time: a match may only start where a run of local-part characters starts (the
    // lookbehind), and every part is bounded, so text without "@" is scanned once, not once
    // per position (which made 1 MB of "a.a.a." take minutes).
    regex:
      /(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}(?![A-Za-z0-9-])/g,
    replace: () => token("email"),
  },
  {
    // A medical record number (with at least one digit) after its label: "MRN: A1234567",
    // "medical record no. 00123456".
    name: "mrn",
    regex:
      /\b(MRN|medical record (?:number|no\.?|#))(\s*[:#]?\s*)((?=[A-Z-]*\d)[A-Z0-9][A-Z0-9-]{4,19})\b/gi,
    replace: (_m, [label, gap]) => `${label}${gap}${token("mrn")}`,
  },
  {
    // 13 to 19 digits, contiguous or grouped as cards print them (4-4-4-4[-3], Amex 4-6-5)
    // with one separator throughout, that pass the Luhn check.
    name: "card",
    regex:
      /(?<![\w-])(?:\d{13,19}|\d{4}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{4}([ -])\d{6}\2\d{5})(?![\w-])/g,
    replace: (m) => (luhnValid(m.replace(/[ -]/g, "")) ? token("card") : undefined),
  },
  {
    // US SSN: 3-2-4 digits separated by dashes or spaces; never-issued numbers are kept.
    name: "ssn",
    regex: /(?<![\w-])(\d{3})([- ])(\d{2})\2(\d{4})(?![\w-])/g,
    replace: (_m, [area, , group, serial]) =>
      area === "000" ||
      area === "666" ||
      area!.startsWith("9") ||
      group === "00" ||
      serial === "0000"
        ? undefined
        : token("ssn"),
  },
  {
    // North American numbers (with optional +1 and area code in parentheses) and +<country> numbers.
    name: "phone",
    regex:
      /(?<![\w+])(?:(?:\+?1[-. ]?)?(?:\(\d{3}\)\s?|\d{3}[-. ]?)\d{3}[-. ]\d{4}|\+\d{1,3}(?:[-. ]?\d){6,14})(?!\w)/g,
    replace: () => token("phone"),
  },
];

export type RedactionCounts = Partial<Record<PatternName, number>>;

/**
 * Redacts the given patterns from `text`. Returns the same string and no counts
 * when nothing matched.
 */
export function redactText(
  text: string,
  enabled: ReadonlySet<PatternName>,
): { text: string; counts: RedactionCounts | undefined } {
  let out = text;
  let counts: RedactionCounts | undefined;
  for (const pattern of patterns) {
    if (!enabled.has(pattern.name)) continue;
    out = out.replace(pattern.regex, (match: string, ...rest: unknown[]) => {
      // The capture groups come first; the offset and the whole input follow them.
      const replacement = pattern.replace(match, rest as string[]);
      if (replacement === undefined) return match;
      counts ??= {};
      counts[pattern.name] = (counts[pattern.name] ?? 0) + 1;
      return replacement;
    });
  }
  return { text: out, counts };
}
