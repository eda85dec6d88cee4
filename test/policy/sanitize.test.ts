import { describe, expect, it } from "vitest";
import {
  compilePolicy,
  createTraitRegistry,
  defaultPolicy,
  luhnValid,
  maskValue,
  type PatternName,
  planSanitize,
  redactText,
  sanitizeDocument,
} from "../../src/policy/index.js";

const all = new Set<PatternName>(["email", "mrn", "card", "ssn", "phone"]);
const redact = (text: string, patterns: ReadonlySet<PatternName> = all) =>
  redactText(text, patterns).text;

describe("pattern redaction", () => {
  it.each([
    ["SSN 123-45-6789 on file", "SSN [REDACTED:SSN] on file"],
    ["ssn 123 45 6789.", "ssn [REDACTED:SSN]."],
    ["mail jane.doe+x@example.co.uk now", "mail [REDACTED:EMAIL] now"],
    ["call (555) 123-4567 or 555.123.4567", "call [REDACTED:PHONE] or [REDACTED:PHONE]"],
    ["intl +44 20 7946 0958", "intl [REDACTED:PHONE]"],
    ["us +1 555-123-4567", "us [REDACTED:PHONE]"],
    ["MRN: A1234567 admitted", "MRN: [REDACTED:MRN] admitted"],
    ["medical record number 00123456", "medical record number [REDACTED:MRN]"],
    ["card 4111 1111 1111 1111 ok", "card [REDACTED:CARD] ok"],
    ["card 4111-1111-1111-1111", "card [REDACTED:CARD]"],
  ])("%s", (input, want) => {
    expect(redact(input)).toBe(want);
  });

  it.each([
    ["never-issued SSNs are kept", "000-12-3456 666-12-3456 900-12-3456 123-00-4567"],
    ["a 16-digit number failing Luhn is not a card", "order 4111 1111 1111 1112"],
    ["plain numbers and dates stay", "room 12, 2024-05-06, version 1.2.3, id 12345"],
    ["mixed separators are not an SSN", "123-45 6789"],
    ["an MRN label followed by a word is kept", "the MRN number is unknown"],
  ])("%s", (_name, input) => {
    expect(redact(input)).toBe(input);
  });

  it("only enabled patterns apply, and counts are reported", () => {
    const { text, counts } = redactText("a@b.io 123-45-6789 x@y.org", new Set(["email"]));
    expect(text).toBe("[REDACTED:EMAIL] 123-45-6789 [REDACTED:EMAIL]");
    expect(counts).toEqual({ email: 2 });
    expect(redactText("nothing here", all).counts).toBeUndefined();
  });

  it("scans adversarial text in linear time (no catastrophic backtracking)", () => {
    // A megabyte of what every pattern's prefix accepts but no pattern completes. With the
    // earlier e-mail pattern this alone took minutes; the test's timeout would fail it.
    const inputs = [
      "a.".repeat(500_000),
      "1-".repeat(500_000),
      "+1 ".repeat(300_000),
      `${"x".repeat(1_000_000)}@`,
      "MRN ".repeat(250_000),
    ];
    for (const input of inputs) expect(redact(input).length).toBe(input.length);
    expect(redact(`${"a".repeat(64)}@example.org`)).toBe("[REDACTED:EMAIL]");
  });

  it("checks card numbers with Luhn", () => {
    expect(luhnValid("4111111111111111")).toBe(true);
    expect(luhnValid("79927398713")).toBe(true);
    expect(luhnValid("79927398710")).toBe(false);
  });
});

describe("sanitizeDocument", () => {
  const sanitization = {
    pii: { fields: ["ssn", "email", "patient.name"], patterns: ["email", "ssn"] as const },
    financial: { fields: ["account_number"], action: "mask" as const },
  };

  it("removes fields at any depth, anchored paths, through arrays, masks, and redacts text", () => {
    const input = {
      patient: { name: "Jane", ssn: "123-45-6789", age: 41 },
      name: "not the patient's name",
      contacts: [
        { email: "a@b.io", kind: "home" },
        { email: "c@d.io", kind: "work" },
      ],
      billing: { account_number: "DE89 3704", currency: "EUR" },
      notes: "Reach her at jane@example.com, SSN 123-45-6789.",
      visits: [["free text a@b.io"]],
    };
    const frozen = structuredClone(input);
    const plan = planSanitize(
      { fields: ["billing.currency"], classifications: ["pii", "financial"] },
      sanitization,
    );
    const { document, removed } = sanitizeDocument(input, plan);
    expect(document).toEqual({
      patient: { age: 41 },
      name: "not the patient's name",
      contacts: [{ kind: "home" }, { kind: "work" }],
      billing: { account_number: maskValue },
      notes: "Reach her at [REDACTED:EMAIL], SSN [REDACTED:SSN].",
      visits: [["free text [REDACTED:EMAIL]"]],
    });
    expect(input).toEqual(frozen); // the input is not changed
    expect(removed).toEqual([
      { path: "patient.name", kind: "field", action: "removed", classification: "pii" },
      { path: "patient.ssn", kind: "field", action: "removed", classification: "pii" },
      { path: "contacts[0].email", kind: "field", action: "removed", classification: "pii" },
      { path: "contacts[1].email", kind: "field", action: "removed", classification: "pii" },
      {
        path: "billing.account_number",
        kind: "field",
        action: "masked",
        classification: "financial",
      },
      { path: "billing.currency", kind: "field", action: "removed" },
      { path: "notes", kind: "pattern", action: "redacted", pattern: "email", count: 1 },
      { path: "notes", kind: "pattern", action: "redacted", pattern: "ssn", count: 1 },
      { path: "visits[0][0]", kind: "pattern", action: "redacted", pattern: "email", count: 1 },
    ]);
  });

  it("a * segment matches any key; an empty plan changes nothing", () => {
    const plan = planSanitize({ fields: ["records.*.secret"], classifications: [] });
    const { document } = sanitizeDocument(
      { records: { a: { secret: 1, keep: 2 }, b: { secret: 3 } } },
      plan,
    );
    expect(document).toEqual({ records: { a: { keep: 2 }, b: {} } });
    const none = sanitizeDocument(
      { a: "x@y.org", b: [1, null, true] },
      planSanitize({ fields: [], classifications: [] }),
    );
    expect(none).toEqual({ document: { a: "x@y.org", b: [1, null, true] }, removed: [] });
  });
});

describe("sanitizing with the shipped policy", () => {
  const engine = compilePolicy(defaultPolicy, createTraitRegistry());

  it("removes every classified field and pattern of a fixture and nothing else", () => {
    const decision = engine.evaluate({
      traits: ["role:analyst", "compliance:hipaa"],
      context: "USER_ACTION",
      classifications: ["phi"],
    });
    expect(decision.decision).toBe("sanitize");
    const fixture = {
      id: "rec-1",
      patient: {
        first_name: "Ada",
        last_name: "Lovelace",
        dob: "1815-12-10",
        ssn: "123-45-6789",
        ward: "B",
      },
      mrn: "A1234567",
      diagnosis: "J45.909",
      encounters: [
        {
          date: "2024-01-02",
          clinical_notes: "stable",
          summary: "MRN A7654321 called from 555-867-5309",
        },
      ],
      contact: { email: "ada@example.org", city: "London" },
    };
    const { document, removed } = engine.sanitize(fixture, decision.sanitize!);
    expect(document).toEqual({
      id: "rec-1",
      patient: { ward: "B" },
      encounters: [
        { date: "2024-01-02", summary: "MRN [REDACTED:MRN] called from [REDACTED:PHONE]" },
      ],
      contact: { city: "London" },
    });
    expect(removed.map((r) => `${r.path}:${r.pattern ?? r.classification}`).sort()).toEqual([
      "contact.email:pii",
      "diagnosis:phi",
      "encounters[0].clinical_notes:phi",
      "encounters[0].summary:mrn",
      "encounters[0].summary:phone",
      "mrn:phi",
      "patient.dob:pii",
      "patient.first_name:pii",
      "patient.last_name:pii",
      "patient.ssn:pii",
    ]);
  });
});
