import { describe, expect, it, vi } from "vitest";
import { RequestHeaders } from "../../src/server/request-headers.js";

/** The handler's headers as they were built before: every pair appended, refused ones left out. */
function eager(pairs: readonly string[]): Headers {
  const header = new Headers();
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    try {
      header.append(pairs[i] as string, pairs[i + 1] as string);
    } catch {
      // refused, as before
    }
  }
  return header;
}

const cases: Record<string, string[]> = {
  "a gRPC call": [
    "content-type",
    "application/grpc",
    "te",
    "trailers",
    "authorization",
    `Bearer ${"x".repeat(300)}`,
    "user-agent",
    "grpc-node-js/1.12",
  ],
  "a header twice": ["authorization", "Bearer a", "authorization", "Bearer b", "x-api-key", "k"],
  "whitespace at the edges": ["x-request-id", "  abc \t", "if-match", '"v1" '],
  "values Headers refuses": [
    "x-a",
    "ok",
    "x-b",
    "bad\u0000value",
    "x-c",
    "line\r\nbreak",
    "x-d",
    "é",
  ],
  "a value beyond Latin-1": ["x-e", "\u2603", "x-e", "fine"],
  "set-cookie and empty values": ["set-cookie", "a=1", "set-cookie", "b=2", "x-empty", ""],
  nothing: [],
  "a cookie split in two (HTTP/2 clients may)": ["cookie", "a=1", "cookie", "b=2", "x", "1"],
  "names not in lowercase (a list from elsewhere)": ["X-Api-Key", "k", "Authorization", "Bearer z"],
  // Trimmed by a scan: a regular expression (/[\t\n\r ]+$/) took 55–60 s on this value, a
  // header an unauthenticated client can send (the suite would hang here).
  "a long run of spaces inside and around a value": [
    "x-long",
    `a${" ".repeat(200_000)}a`,
    "x-edges",
    `${" ".repeat(100_000)}x${" ".repeat(100_000)}`,
  ],
};

describe("RequestHeaders", () => {
  it.each(Object.entries(cases))("answers get and has as Headers does: %s", (_, pairs) => {
    const want = eager(pairs);
    const names = [...new Set(pairs.filter((_, i) => i % 2 === 0))];
    for (const name of [...names, "absent", "X-Api-Key", "AUTHORIZATION", "If-Match"]) {
      const lazy = new RequestHeaders(pairs);
      expect(lazy.get(name), name).toBe(want.get(name));
      expect(lazy.has(name), name).toBe(want.has(name));
    }
  });

  it.each(Object.entries(cases))("iterates as Headers does: %s", (_, pairs) => {
    const want = eager(pairs);
    const lazy = new RequestHeaders(pairs);
    expect(lazy.get("authorization")).toBe(want.get("authorization"));
    expect([...lazy]).toEqual([...want]);
    expect([...new RequestHeaders(pairs).entries()]).toEqual([...want.entries()]);
    expect([...new RequestHeaders(pairs).keys()]).toEqual([...want.keys()]);
    expect([...new RequestHeaders(pairs).values()]).toEqual([...want.values()]);
    expect(new RequestHeaders(pairs).getSetCookie()).toEqual(want.getSetCookie());
    const seen: string[] = [];
    new RequestHeaders(pairs).forEach((v, k) => {
      seen.push(`${k}=${v}`);
    });
    expect(seen).toEqual([...want].map(([k, v]) => `${k}=${v}`));
    // Built from it, a Headers holds the same.
    expect([...new Headers(new RequestHeaders(pairs))]).toEqual([...want]);
  });

  it("changes as Headers does, the request's headers kept", () => {
    const pairs = cases["a header twice"] as string[];
    const lazy = new RequestHeaders(pairs);
    const want = eager(pairs);
    for (const h of [lazy, want]) {
      h.set("x-api-key", "other");
      h.append("x-new", "1");
      h.delete("authorization");
    }
    expect([...lazy]).toEqual([...want]);
    expect(lazy.get("x-api-key")).toBe("other");
    expect(lazy.get("authorization")).toBeNull();
    expect(lazy).toBeInstanceOf(Headers);
  });

  it("refuses a name that is not a token, as Headers does", () => {
    for (const name of ["", "bad name", ":path", "x\u00e9"]) {
      expect(() => new Headers().get(name), name).toThrow(TypeError);
      expect(() => new RequestHeaders(["x", "1"]).get(name), name).toThrow(TypeError);
    }
  });

  it("reads what is asked for without building the headers object", () => {
    const append = vi.spyOn(Headers.prototype, "append");
    try {
      const lazy = new RequestHeaders(cases["a gRPC call"] as string[]);
      expect(lazy.get("authorization")).toMatch(/^Bearer x+$/);
      expect(lazy.get("x-request-id")).toBeNull();
      expect(lazy.has("user-agent")).toBe(true);
      expect(append).not.toHaveBeenCalled();
      expect([...lazy]).toHaveLength(4);
      expect(append).toHaveBeenCalledTimes(4);
    } finally {
      append.mockRestore();
    }
  });
});
