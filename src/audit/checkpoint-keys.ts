import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
} from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The keys of the audit log's signed checkpoints (docs/audit.md, "Checkpoints"): Ed25519.
 * The core signs with AUDIT_CHECKPOINT_KEY (the private key, only it holds); `audit verify`
 * needs only public keys: the one derived from AUDIT_CHECKPOINT_KEY when it is set, those of
 * retired keys in AUDIT_CHECKPOINT_KEY_PREVIOUS, and AUDIT_CHECKPOINT_PUBLIC_KEYS (for a
 * verifier that does not hold the private key). No key value ever appears in a message.
 */

/** A public key checkpoints are verified with, and its id. */
export interface CheckpointPublicKey {
  /** First 16 hex digits of the SHA-256 of the key's SubjectPublicKeyInfo (DER). */
  keyId: string;
  publicKey: KeyObject;
}

export interface CheckpointSigningKey extends CheckpointPublicKey {
  privateKey: KeyObject;
}

export interface CheckpointKeys {
  /** Unset: the core writes no checkpoints. */
  signing: CheckpointSigningKey | undefined;
  /** Every key `audit verify` accepts (the signing key's public key first), without repeats. */
  trusted: CheckpointPublicKey[];
}

// DER prefixes of an Ed25519 PKCS#8 private key (before its 32-byte seed) and of an Ed25519
// SubjectPublicKeyInfo (before its 32-byte public key), RFC 8410.
const pkcs8Prefix = Buffer.from("302e020100300506032b657004220420", "hex");
const spkiPrefix = Buffer.from("302a300506032b6570032100", "hex");

export function checkpointKeyId(publicKey: KeyObject): string {
  const der = publicKey.export({ format: "der", type: "spki" });
  return createHash("sha256").update(der).digest("hex").slice(0, 16);
}

/** The raw 32-byte public key, base64: the form AUDIT_CHECKPOINT_PUBLIC_KEYS takes. */
export function publicKeyBase64(publicKey: KeyObject): string {
  return publicKey
    .export({ format: "der", type: "spki" })
    .subarray(spkiPrefix.length)
    .toString("base64");
}

/** 32 bytes given as base64 or base64url (with or without padding), else undefined. */
function raw32(text: string): Buffer | undefined {
  if (!/^[A-Za-z0-9+/_-]{43}=?$/.test(text)) return undefined;
  const bytes = Buffer.from(text.replace(/-/g, "+").replace(/_/g, "/"), "base64");
  return bytes.length === 32 ? bytes : undefined;
}

function parsePrivateKey(text: string): KeyObject {
  const seed = raw32(text);
  const key = seed
    ? createPrivateKey({ key: Buffer.concat([pkcs8Prefix, seed]), format: "der", type: "pkcs8" })
    : createPrivateKey(text);
  if (key.asymmetricKeyType !== "ed25519") throw new Error("not an Ed25519 key");
  return key;
}

function parsePublicKey(text: string): KeyObject {
  // createPublicKey would derive one from a private key: keep those out of public lists.
  if (text.includes("PRIVATE KEY")) throw new Error("a private key");
  const raw = raw32(text);
  const key = raw
    ? createPublicKey({ key: Buffer.concat([spkiPrefix, raw]), format: "der", type: "spki" })
    : createPublicKey(text);
  if (key.asymmetricKeyType !== "ed25519") throw new Error("not an Ed25519 key");
  return key;
}

/** PEM blocks, and the rest split on commas and white space. */
function entries(list: string): string[] {
  const pem = /-----BEGIN [A-Z ]+-----[\s\S]*?-----END [A-Z ]+-----/g;
  const blocks = list.match(pem) ?? [];
  const rest = list.replace(pem, ",").split(/[\s,]+/);
  return [...blocks, ...rest].filter((entry) => entry !== "");
}

const entry = (publicKey: KeyObject): CheckpointPublicKey => ({
  keyId: checkpointKeyId(publicKey),
  publicKey,
});

/** Reads the checkpoint keys; each problem (never a key's value) goes to `problems`. */
export function checkpointKeysFrom(env: NodeJS.ProcessEnv, problems: string[]): CheckpointKeys {
  let signing: CheckpointSigningKey | undefined;
  const privateText = env.AUDIT_CHECKPOINT_KEY?.trim() || undefined;
  if (privateText !== undefined) {
    try {
      const privateKey = parsePrivateKey(privateText);
      signing = { ...entry(createPublicKey(privateKey)), privateKey };
    } catch {
      problems.push(
        "AUDIT_CHECKPOINT_KEY must be an Ed25519 private key: PKCS#8 PEM " +
          "(openssl genpkey -algorithm ed25519) or its 32-byte seed in base64",
      );
    }
  }
  const trusted: CheckpointPublicKey[] = signing ? [entry(signing.publicKey)] : [];
  for (const name of ["AUDIT_CHECKPOINT_KEY_PREVIOUS", "AUDIT_CHECKPOINT_PUBLIC_KEYS"]) {
    entries(env[name] ?? "").forEach((text, i) => {
      try {
        const key = entry(parsePublicKey(text));
        if (!trusted.some((known) => known.keyId === key.keyId)) trusted.push(key);
      } catch {
        problems.push(
          `${name} entry ${i + 1} must be an Ed25519 public key: PEM ` +
            "(openssl pkey -pubout) or the raw 32 bytes in base64",
        );
      }
    });
  }
  return { signing, trusted };
}

/**
 * Demo mode keeps a generated checkpoint key in DATA_DIR (mode 0600), like the demo's data
 * encryption key, so that checkpoints of one run verify in the next. Sets
 * AUDIT_CHECKPOINT_KEY in `env` and returns a note for the demo's banner (never the key).
 */
export function ensureDemoCheckpointKey(env: NodeJS.ProcessEnv): string | undefined {
  if (env.AUDIT_CHECKPOINT_KEY) return undefined;
  const dataDir = env.DATA_DIR?.trim() || "./data";
  const file = join(dataDir, "demo-audit-checkpoint.key");
  mkdirSync(dataDir, { recursive: true });
  if (!existsSync(file)) {
    const { privateKey } = generateKeyPairSync("ed25519");
    writeFileSync(file, privateKey.export({ format: "pem", type: "pkcs8" }), { mode: 0o600 });
  }
  env.AUDIT_CHECKPOINT_KEY = readFileSync(file, "utf8").trim();
  return `AUDIT_CHECKPOINT_KEY was not set: the demo key in ${file} is used (generated on first run)`;
}
