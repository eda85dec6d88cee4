import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consoleCall, consoleSignIn } from "../support/console.js";
import { postgresUrlFor, twoHandlesOnOneSchema } from "../support/database.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Two replicas on one PostgreSQL database serve the same console sessions: a cookie from a
 * sign-in on A works on B, and signing out on B ends it on A.
 */
const url = postgresUrlFor("console-two-servers");

describe.skipIf(!url)("console sessions across two servers on one PostgreSQL", () => {
  let a: TestServer;
  let b: TestServer;
  const admin = { username: "shared-console", password: "Shared-console-Pass-1180" };
  let apiKey = "";

  beforeAll(async () => {
    const [dbA, dbB] = await twoHandlesOnOneSchema(url ?? "");
    b = await startTestServer({ db: dbB });
    a = await startTestServer({ db: dbA });
    await a.createUser(admin.username, admin.password, ["auditor"]);
    apiKey = await a.createApiKey(["settings:read", "audit:read"]);
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it("serves a session signed in on one replica from the other, and ends it on both", async () => {
    const cookie = await consoleSignIn(a.url, admin, apiKey);
    const rpc = "/console/rpc/traitgate.settings.v1.SettingsService/GetSettings";
    expect((await consoleCall(b.url, rpc, {}, cookie)).status).toBe(200);
    expect((await consoleCall(b.url, "/console/api/session", {}, cookie)).body).toMatchObject({
      stage: "active",
      user: { username: admin.username },
    });
    expect((await consoleCall(b.url, "/console/api/sign-out", {}, cookie)).status).toBe(200);
    expect((await consoleCall(a.url, "/console/api/session", {}, cookie)).body.stage).toBe(
      "signed_out",
    );
    expect((await consoleCall(a.url, rpc, {}, cookie)).status).toBe(401);
  });
});
