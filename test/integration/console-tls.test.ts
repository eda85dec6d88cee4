import * as https from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTestCertificate, type TestCertificate } from "../support/tls.js";

/** Under TLS the console's cookie is `__Host-` and Secure, and the Origin it wants is https. */
describe("admin console under TLS", () => {
  let certificate: TestCertificate;
  let server: TestServer;
  let agent: https.Agent;
  const user = { username: "tls-auditor", password: "Tls-auditor-Pass-5542" };

  beforeAll(async () => {
    certificate = await createTestCertificate();
    server = await startTestServer({
      env: { TLS_CERT_FILE: certificate.certFile, TLS_KEY_FILE: certificate.keyFile },
    });
    await server.createUser(user.username, user.password, ["auditor"]);
    agent = new https.Agent({ ca: certificate.cert, ALPNProtocols: ["http/1.1"] });
  });
  afterAll(async () => {
    agent?.destroy();
    await server?.close();
    await certificate?.remove();
  });

  function post(path: string, origin: string, body: unknown) {
    return new Promise<{ status: number; setCookie: string[] }>((resolve, reject) => {
      const req = https.request(
        `${server.url}${path}`,
        {
          method: "POST",
          agent,
          headers: { "content-type": "application/json", origin, "x-traitgate-console": "1" },
        },
        (res) => {
          res.resume();
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, setCookie: res.headers["set-cookie"] ?? [] }),
          );
        },
      );
      req.on("error", reject);
      req.end(JSON.stringify(body));
    });
  }

  it("sets a __Host- cookie that is Secure, HttpOnly and SameSite=Strict", async () => {
    const res = await post("/console/api/sign-in", server.url, user);
    expect(res.status).toBe(200);
    expect(res.setCookie).toHaveLength(1);
    expect(res.setCookie[0]).toMatch(
      /^__Host-tg_console=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Secure$/,
    );
  });

  it("refuses the plain-http origin of the same host", async () => {
    const res = await post("/console/api/sign-in", server.url.replace("https:", "http:"), user);
    expect(res.status).toBe(403);
    expect(res.setCookie).toEqual([]);
  });
});
