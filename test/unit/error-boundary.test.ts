import { StructSchema } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { PluginError } from "../../src/gateway/gateway.js";
import { createLogger, silentLogger } from "../../src/log.js";
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

describe("a plugin's error body", () => {
  it.each([500, 502, 503])(
    "reaches the caller but never a log line when the plugin answers %i",
    (status) => {
      const lines: string[] = [];
      const log = createLogger({ level: "debug", destination: { write: (l) => lines.push(l) } });
      const marker = `PLUGIN-ERROR-BODY-${status}`;
      const err = toConnectError(
        new PluginError(status, { error: marker, nested: { note: marker } }, 64),
        log,
      );
      expect(reasonOf(err)).toBe("PLUGIN_ERROR");
      expect(JSON.stringify(err.findDetails(StructSchema))).toContain(marker);
      expect(lines.length).toBeGreaterThan(0); // the failure itself is logged, with its status
      expect(lines.join("\n")).toContain(`"plugin_status":"${status}"`);
      expect(lines.join("\n")).toContain(`"replyBytes":64`);
      expect(lines.join("\n")).not.toContain(marker);
    },
  );
});
