import { hash } from "@node-rs/argon2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { argon2Options } from "../../src/identity/passwords.js";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { callJson } from "../support/http.js";
import { startTestServer, type TestServer } from "../support/server.js";

/**
 * Passwords are compared in NFKC (NIST SP 800-63B §5.1.1.2): one typed in another Unicode form
 * (NFD from one keyboard, NFC from another) logs in, on a real server over REST, with its
 * database on PGlite and on PostgreSQL. Hashes stored before normalisation keep working.
 */

const nfc = "crème brûlée à l'été 2024";
const nfd = nfc.normalize("NFD");

describe.each(databaseTargets())("password normalisation on $name", (target) => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ db: await openTestDatabase(target) });
  });
  afterAll(async () => server?.close());

  const login = (username: string, password: string) =>
    callJson(server.url, "/auth/login", { username, password });

  it("logs in with a password set in NFC and typed in NFD, and the other way round", async () => {
    expect(nfd).not.toBe(nfc);
    await server.createUser("nora", nfc);
    expect((await login("nora", nfd)).status).toBe(200);
    expect((await login("nora", nfc)).status).toBe(200);
    await server.createUser("otto", nfd);
    expect((await login("otto", nfc)).status).toBe(200);
    expect((await login("otto", "creme brulee a l'ete 2024")).status).toBe(401);
  });

  it("keeps a hash made before normalisation working for the password as it was typed", async () => {
    const id = await server.createUser("lena", "placeholder password 0001");
    const typed = "ｆｕｌｌ ｗｉｄｔｈ passphrase 9";
    await server.core.db.query("UPDATE users SET password_hash = $2 WHERE id = $1", [
      id,
      await hash(typed, argon2Options),
    ]);
    expect((await login("lena", typed)).status).toBe(200);
    expect((await login("lena", `${typed}!`)).status).toBe(401);
  });

  it("treats the NFD form of the current password as the same password on change", async () => {
    await server.createUser("pia", nfc);
    const token = (await login("pia", nfc)).body.token as string;
    const change = await callJson(
      server.url,
      "/auth/password",
      { current_password: nfd, new_password: nfd },
      { token },
    );
    expect([change.status, change.reason]).toEqual([400, "PASSWORD_UNCHANGED"]);
  });
});
