import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  checkSignature,
  ensureDemoCheckpointKey,
  parseAuditVerifyArgs,
  parseCheckpoint,
  signCheckpoint,
} from "../../src/audit/index.js";
import { ConfigError, loadConfig } from "../../src/config.js";

const base = {
  JWT_SECRET: "k3Jd9s0Qm1Zx8Vb7Nc6Lp5Ow4Ie3Ru2Ty1",
  DATA_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString("base64"),
};

function problemsOf(env: NodeJS.ProcessEnv): readonly string[] {
  try {
    loadConfig({ ...base, ...env });
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

const keyPair = () => generateKeyPairSync("ed25519");
const pkcs8 = (key: ReturnType<typeof keyPair>) =>
  String(key.privateKey.export({ format: "pem", type: "pkcs8" }));
const spki = (key: ReturnType<typeof keyPair>) =>
  String(key.publicKey.export({ format: "pem", type: "spki" }));
const rawPublic = (key: ReturnType<typeof keyPair>) =>
  key.publicKey.export({ format: "der", type: "spki" }).subarray(12).toString("base64");

describe("checkpoint keys from the environment", () => {
  it("is off by default, every 60 s when a key is set", () => {
    const { config } = loadConfig(base);
    expect(config.auditCheckpoints.keys).toEqual({ signing: undefined, trusted: [] });
    expect(config.auditCheckpoints.intervalSeconds).toBe(60);
  });

  it("takes a PKCS#8 PEM or a base64 seed, and trusts the key's public half", () => {
    const seed = randomBytes(32);
    const fromSeed = loadConfig({ ...base, AUDIT_CHECKPOINT_KEY: seed.toString("base64") }).config
      .auditCheckpoints.keys;
    const again = loadConfig({ ...base, AUDIT_CHECKPOINT_KEY: seed.toString("base64url") }).config
      .auditCheckpoints.keys;
    expect(fromSeed.signing?.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(again.signing?.keyId).toBe(fromSeed.signing?.keyId);
    expect(fromSeed.trusted.map((k) => k.keyId)).toEqual([fromSeed.signing?.keyId]);

    const pair = keyPair();
    const fromPem = loadConfig({ ...base, AUDIT_CHECKPOINT_KEY: pkcs8(pair) }).config
      .auditCheckpoints.keys;
    const checkpoint = signCheckpoint(
      { seq: "7", hash: "a".repeat(64) },
      "2026-01-01T00:00:00.000Z",
      fromPem.signing as never,
    );
    // Verification needs only the public key, as PEM or raw base64.
    for (const publicKey of [spki(pair), rawPublic(pair)]) {
      const verifier = loadConfig({ ...base, AUDIT_CHECKPOINT_PUBLIC_KEYS: publicKey }).config
        .auditCheckpoints.keys;
      expect(verifier.signing).toBeUndefined();
      expect(checkSignature(checkpoint, verifier.trusted)).toBe("valid");
    }
  });

  it("lists previous and public keys (PEM blocks and base64, comma or line separated), once each", () => {
    const [current, old1, old2] = [keyPair(), keyPair(), keyPair()];
    const { keys } = loadConfig({
      ...base,
      AUDIT_CHECKPOINT_KEY: pkcs8(current),
      AUDIT_CHECKPOINT_KEY_PREVIOUS: `${spki(old1)}\n${rawPublic(old2)}`,
      AUDIT_CHECKPOINT_PUBLIC_KEYS: `${rawPublic(current)}, ${rawPublic(old1)}`,
    }).config.auditCheckpoints;
    expect(keys.trusted).toHaveLength(3);
  });

  it("names each bad variable without repeating its value", () => {
    const secret = "not-a-key-but-maybe-secret-value";
    const problems = problemsOf({
      AUDIT_CHECKPOINT_KEY: secret,
      AUDIT_CHECKPOINT_KEY_PREVIOUS: `${rawPublic(keyPair())},${secret}`,
      AUDIT_CHECKPOINT_PUBLIC_KEYS: pkcs8(keyPair()),
      AUDIT_CHECKPOINT_INTERVAL_SECONDS: "-1",
    });
    expect(problems).toEqual([
      expect.stringMatching(/^AUDIT_CHECKPOINT_KEY must be an Ed25519 private key/),
      expect.stringMatching(/^AUDIT_CHECKPOINT_KEY_PREVIOUS entry 2 must be an Ed25519 public/),
      expect.stringMatching(/^AUDIT_CHECKPOINT_PUBLIC_KEYS entry 1 must be an Ed25519 public/),
      expect.stringMatching(/^AUDIT_CHECKPOINT_INTERVAL_SECONDS must be an integer from 0/),
    ]);
    expect(problems.join("\n")).not.toContain(secret);
    // Another algorithm's key is refused too.
    const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 });
    expect(
      problemsOf({
        AUDIT_CHECKPOINT_KEY: String(rsa.privateKey.export({ format: "pem", type: "pkcs8" })),
      }),
    ).toEqual([expect.stringMatching(/^AUDIT_CHECKPOINT_KEY must be an Ed25519/)]);
  });
});

describe("the demo's checkpoint key", () => {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-checkpoint-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("is generated once in DATA_DIR (mode 0600) and reused, unless one is configured", () => {
    const env: NodeJS.ProcessEnv = { DATA_DIR: dir };
    expect(ensureDemoCheckpointKey(env)).toContain("demo-audit-checkpoint.key");
    const file = join(dir, "demo-audit-checkpoint.key");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(env.AUDIT_CHECKPOINT_KEY).toBe(readFileSync(file, "utf8").trim());
    const next: NodeJS.ProcessEnv = { DATA_DIR: dir };
    ensureDemoCheckpointKey(next);
    expect(next.AUDIT_CHECKPOINT_KEY).toBe(env.AUDIT_CHECKPOINT_KEY);
    expect(ensureDemoCheckpointKey({ DATA_DIR: dir, AUDIT_CHECKPOINT_KEY: "set" })).toBeUndefined();
  });
});

describe("audit verify's options", () => {
  const checkpoint = {
    seq: "42",
    hash: "b".repeat(64),
    time: "2026-01-01T00:00:00.000Z",
    key_id: "0123456789abcdef",
    signature: "A".repeat(86),
  };

  it("takes heads and checkpoints, the latter as a log line or the bare object", () => {
    const line = JSON.stringify({ level: "info", msg: "audit checkpoint", checkpoint });
    expect(
      parseAuditVerifyArgs([
        "--expect-head",
        `7:${"c".repeat(64)}`,
        "--expect-checkpoint",
        line,
        "--expect-checkpoint",
        JSON.stringify(checkpoint),
      ]),
    ).toEqual({
      expectHeads: [{ seq: "7", hash: "c".repeat(64) }],
      expectCheckpoints: [parseCheckpoint(checkpoint), parseCheckpoint(checkpoint)],
    });
  });

  it.each([
    [["--expect-head", "7"], /--expect-head must be SEQ:HASH/],
    [["--expect-head", `x:${"c".repeat(64)}`], /--expect-head must be SEQ:HASH/],
    [["--expect-checkpoint", "{not json"], /--expect-checkpoint must be a checkpoint in JSON/],
    [
      ["--expect-checkpoint", JSON.stringify({ ...checkpoint, hash: "short" })],
      /checkpoint field "hash" is missing or malformed/,
    ],
    [["--expect-everything"], /Unknown option '--expect-everything'/],
  ])("refuses %j, naming what is wrong", (args, message) => {
    expect(() => parseAuditVerifyArgs(args)).toThrow(message);
  });
});
