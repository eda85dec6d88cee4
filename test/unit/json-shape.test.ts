import type { JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { UpdateUserRequestSchema } from "../../gen/traitgate/identity/v1/user_admin_pb.js";
import {
  CreateBookRequestSchema,
  SearchBooksRequestSchema,
} from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { findShapeMismatch } from "../../src/server/transcoder/json-shape.js";

/** Where a REST body has the wrong shape, said as the client wrote it (src/server/transcoder/json-shape.ts). */
describe("findShapeMismatch", () => {
  it("names a message field given a list, with the object it takes", () => {
    expect(findShapeMismatch(UpdateUserRequestSchema, { roles: ["clinician"] })).toEqual({
      path: "roles",
      expected: 'an object {"values": [...]}',
      got: "an array",
    });
  });

  it.each<[JsonValue, string, string, string]>([
    [{ labels: ["a"] }, "labels", "an object (a map)", "an array"],
    [{ labels: { a: 1 } }, "labels.a", "a string", "a number"],
    [{ maxPages: "x", max_pages: true }, "max_pages", "an integer", "true or false"],
    [{ cursor: 12 }, "cursor", "a base64 string", "a number"],
    [{ availableOnly: "yes" }, "availableOnly", "a boolean", "a string"],
    [
      { publishedAfter: {} },
      "publishedAfter",
      'a time string, e.g. "2025-03-01T00:00:00Z"',
      "an object",
    ],
  ])("%j: %s", (body, path, expected, got) => {
    expect(findShapeMismatch(SearchBooksRequestSchema, body)).toEqual({ path, expected, got });
  });

  it("follows nested messages and lists, and takes either key spelling", () => {
    expect(
      findShapeMismatch(CreateBookRequestSchema, { book: { pageCount: "12", tags: ["a", {}] } }),
    ).toEqual({ path: "book.tags[1]", expected: "a string", got: "an object" });
    expect(findShapeMismatch(CreateBookRequestSchema, { book: { genre: "SCIFI" } })).toEqual({
      path: "book.genre",
      expected: "one of GENRE_UNSPECIFIED, GENRE_FICTION, GENRE_HISTORY",
      got: '"SCIFI"',
    });
  });

  it("finds nothing in a body of the right shape, null values and unknown keys included", () => {
    const body = {
      book: { title: "t", page_count: "3", tags: ["a"], genre: "GENRE_FICTION", author: null },
      typo: 1,
    };
    expect(findShapeMismatch(CreateBookRequestSchema, body)).toBeUndefined();
    expect(
      findShapeMismatch(SearchBooksRequestSchema, {
        labels: { a: "b" },
        max_pages: 3,
        published_after: "2025-01-01T00:00:00Z",
      }),
    ).toBeUndefined();
  });
});
