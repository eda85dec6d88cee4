import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../src/log.js";
import { reasonOf, toConnectError } from "../../src/server/error-boundary.js";

describe("the error boundary", () => {
  it("answers text PostgreSQL cannot store (NUL, bad Unicode) as the caller's error", () => {
    for (const code of ["22021", "22P05"]) {
      const err = toConnectError(
        Object.assign(new Error("invalid byte sequence"), { code }),
        silentLogger,
      );
      expect([err.code, reasonOf(err)]).toEqual([Code.InvalidArgument, "INVALID_TEXT"]);
      expect(err.rawMessage).not.toContain("byte sequence");
    }
  });

  it("keeps any other unknown error internal and generic", () => {
    const err = toConnectError(
      Object.assign(new Error("relation x does not exist"), { code: "42P01" }),
      silentLogger,
    );
    expect([err.code, err.rawMessage]).toEqual([Code.Internal, "internal error"]);
  });
});
