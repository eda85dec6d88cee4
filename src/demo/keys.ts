import { generateKeyPairSync } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateDataKey } from "../crypto/secret-box.js";

/**
 * Keys the demo generates once and keeps in DATA_DIR (mode 0600), so that what one run
 * sealed or signed opens and verifies in the next, and so that commands run against the
 * demo's DATA_DIR (`traitgate keys rotate`, `users create`, `audit verify`) find them
 * without being told.
 */
export const demoKeyFiles = {
  DATA_ENCRYPTION_KEY: "demo-encryption.key",
  AUDIT_CHECKPOINT_KEY: "demo-audit-checkpoint.key",
  JWT_PRIVATE_KEY: "demo-jwt-signing.key",
} as const;

export type DemoKeyName = keyof typeof demoKeyFiles;

const dataDirOf = (env: NodeJS.ProcessEnv) => env.DATA_DIR?.trim() || "./data";

/** Demo mode: the data key from DATA_DIR, generated on the first run, unless one is set. */
export function ensureDemoDataKey(env: NodeJS.ProcessEnv): string | undefined {
  if (env.DATA_ENCRYPTION_KEY) return undefined;
  const dataDir = dataDirOf(env);
  const file = join(dataDir, demoKeyFiles.DATA_ENCRYPTION_KEY);
  mkdirSync(dataDir, { recursive: true });
  if (!existsSync(file)) writeFileSync(file, `${generateDataKey()}\n`, { mode: 0o600 });
  env.DATA_ENCRYPTION_KEY = readFileSync(file, "utf8").trim();
  return `DATA_ENCRYPTION_KEY was not set: the demo key in ${file} is used (generated on first run)`;
}

/**
 * Demo mode signs tokens with EdDSA (Ed25519), its private key generated on the first run and
 * kept in DATA_DIR: the JWKS then publishes the public key, so other services verify the
 * demo's tokens offline, and tokens stay valid across restarts. Left alone when the operator
 * chose how to sign (JWT_SECRET, JWT_PRIVATE_KEY, or a JWT_ALGORITHM other than EdDSA).
 * Sets JWT_ALGORITHM and JWT_PRIVATE_KEY in `env`; returns a note for the banner (never the key).
 */
export function ensureDemoSigningKey(env: NodeJS.ProcessEnv): string | undefined {
  const algorithm = env.JWT_ALGORITHM?.trim();
  if (env.JWT_SECRET || env.JWT_PRIVATE_KEY || (algorithm && algorithm !== "EdDSA")) {
    return undefined;
  }
  const dataDir = dataDirOf(env);
  const file = join(dataDir, demoKeyFiles.JWT_PRIVATE_KEY);
  mkdirSync(dataDir, { recursive: true });
  if (!existsSync(file)) {
    const { privateKey } = generateKeyPairSync("ed25519");
    writeFileSync(file, privateKey.export({ format: "pem", type: "pkcs8" }), { mode: 0o600 });
  }
  env.JWT_ALGORITHM = "EdDSA";
  env.JWT_PRIVATE_KEY = readFileSync(file, "utf8");
  return `JWT_SECRET was not set: tokens are signed with EdDSA, the demo key in ${file} (generated on first run; public key at /.well-known/jwks.json)`;
}

/**
 * A one-shot command: each of `names` that is unset in `env` but kept by the demo in DATA_DIR
 * is set from its file (nothing is created). Returns a note per key taken, naming the file.
 */
export function useDemoKeys(env: NodeJS.ProcessEnv, names: readonly DemoKeyName[]): string[] {
  const notes: string[] = [];
  for (const name of names) {
    if (env[name]?.trim()) continue;
    const file = join(dataDirOf(env), demoKeyFiles[name]);
    if (!existsSync(file)) continue;
    env[name] = readFileSync(file, "utf8").trim();
    notes.push(`${name} is not set: using the demo's key in ${file}`);
  }
  return notes;
}
