import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postgresUrlFor, twoHandlesOnOneSchema } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * An allowlist change made on one server reaches a second server sharing the
 * PostgreSQL database within one second (the allowlist cache's bound), with no
 * restart: B refuses the call once its clock has moved past the cache's age.
 */

const url = postgresUrlFor("gateway two-servers");
const password = "gateway-two-servers-pw";

describe.skipIf(!url)("the allowlist on two servers", () => {
  let a: TestServer;
  let b: TestServer;
  const clockB = { t: Date.now(), now: () => clockB.t };

  beforeAll(async () => {
    const [dbA, dbB] = await twoHandlesOnOneSchema(url ?? "");
    b = await startTestServer({ db: dbB, clock: clockB });
    a = await startTestServer({ db: dbA });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it("an entry removed on A refuses calls on B within one second", async () => {
    await a.createUser("root", password, ["admin"]);
    const token = (await callJson(a.url, "/auth/login", { username: "root", password })).body
      .token as string;
    const key = await a.createApiKey(["plugins:write", "operator:write", "service_accounts:write"]);
    const admin = (path: string, body: unknown, method = "POST") =>
      callJson(a.url, path, body, { token, method, headers: { "x-api-key": key } });
    // The allowlist names existing callers only: ai-core is a service account.
    await admin("/api/admin/service-accounts", { name: "ai-core" });
    // No process listens on port 9 (discard): an allowed call ends as PLUGIN_UNAVAILABLE.
    expect(
      (
        await admin("/admin/plugins", {
          id: "shared",
          plugin_type: "internal",
          endpoints: { rag_query: "/rag/query" },
          port: 9,
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await admin(
          "/admin/operator/allowlist",
          { caller: "ai-core", target: "shared", operations: ["rag_query"] },
          "PUT",
        )
      ).status,
    ).toBe(200);
    const callOnB = () =>
      b.core.gateway
        .call({
          caller: { kind: "service", id: "sa", name: "ai-core" },
          callerPlugin: "ai-core",
          pluginId: "shared",
          operation: "rag_query",
          payload: {},
          timeoutMs: 200,
          requestId: "two-servers",
        })
        .then(
          () => "ok",
          (e: { reason?: string }) => e.reason,
        );
    expect(await callOnB()).toBe("PLUGIN_UNAVAILABLE");
    const removed = await callJson(
      a.url,
      "/admin/operator/allowlist?caller=ai-core&target=shared",
      undefined,
      { token, method: "DELETE", headers: { "x-api-key": key } },
    );
    expect(removed.status).toBe(200);
    clockB.t += 1001;
    expect(await callOnB()).toBe("NOT_ALLOWLISTED");
  });
});
