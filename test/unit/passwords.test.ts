import { hash } from "@node-rs/argon2";
import { describe, expect, it } from "vitest";
import { argon2Options, createPasswordHasher } from "../../src/identity/passwords.js";

describe("password hasher", () => {
  it("hashes with argon2id at OWASP parameters and verifies", async () => {
    const hasher = await createPasswordHasher();
    const hash = await hasher.hash("a long enough password");
    expect(hash).toMatch(
      new RegExp(
        `^\\$argon2id\\$v=19\\$m=${argon2Options.memoryCost},t=${argon2Options.timeCost},p=1\\$`,
      ),
    );
    expect(await hasher.verify(hash, "a long enough password")).toBe(true);
    expect(await hasher.verify(hash, "another password")).toBe(false);
    expect(await hasher.verify("not a hash", "x")).toBe(false);
  });

  it("hashes at a cost passed in code (the test servers'), and checks hashes of any cost", async () => {
    const cheap = await createPasswordHasher({ cost: { memoryCost: 1024, timeCost: 1 } });
    const cheapHash = await cheap.hash("a long enough password");
    expect(cheapHash).toMatch(/^\$argon2id\$v=19\$m=1024,t=1,p=1\$/);
    // Each hash carries its parameters: either hasher checks the other's hashes.
    const standard = await createPasswordHasher();
    expect(await standard.verify(cheapHash, "a long enough password")).toBe(true);
    expect(await cheap.verify(await standard.hash("x long password"), "x long password")).toBe(
      true,
    );
  });
});

describe("password normalisation (NFKC, NIST SP 800-63B §5.1.1.2)", () => {
  const nfc = "crème brûlée à l'été 2024";
  const nfd = nfc.normalize("NFD");

  it("verifies a password set in NFC when it is typed in NFD, and the other way round", async () => {
    expect(nfd).not.toBe(nfc);
    const hasher = await createPasswordHasher();
    expect(await hasher.verify(await hasher.hash(nfc), nfd)).toBe(true);
    expect(await hasher.verify(await hasher.hash(nfd), nfc)).toBe(true);
    // Compatibility forms too: full-width letters and ligatures are their plain letters.
    const fancy = "ｆｉｅｌｄ ﬁeld notebook 77";
    expect(await hasher.verify(await hasher.hash(fancy), "field field notebook 77")).toBe(true);
    expect(await hasher.verify(await hasher.hash(nfc), "creme brulee a l'ete 2024")).toBe(false);
  });

  it("keeps hashes made before normalisation working for the password as it was typed", async () => {
    const hasher = await createPasswordHasher();
    // Stored as typed, not normalised: what the hasher wrote before.
    for (const typed of [nfd, "ｆｕｌｌｗｉｄｔｈ password 1"]) {
      const legacy = await hash(typed, argon2Options);
      expect(await hasher.verify(legacy, typed)).toBe(true);
      expect(await hasher.verify(legacy, `${typed}x`)).toBe(false);
    }
  });
});
